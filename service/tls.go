package service

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// TLSFiles names one listener's TLS files (7.5): its certificate chain
// and key (PEM), and optionally the CA certificates (PEM) a client's
// certificate must chain to, which makes one required (mTLS). All empty:
// plaintext.
type TLSFiles struct {
	Cert, Key, ClientCA string
}

// enabled reports whether the listener speaks TLS.
func (f TLSFiles) enabled() bool { return f.Cert != "" || f.Key != "" || f.ClientCA != "" }

// validate checks that the files come as the flags require (flag is the
// listener's flag prefix, e.g. "--api-tls").
func (f TLSFiles) validate(flag string) error {
	switch {
	case (f.Cert == "") != (f.Key == ""):
		return fmt.Errorf("service: %s-cert and %s-key go together: give both or neither", flag, flag)
	case f.ClientCA != "" && f.Cert == "":
		return fmt.Errorf("service: %s-client-ca needs %s-cert and %s-key (client certificates need TLS)", flag, flag, flag)
	}
	return nil
}

// fileStamp is what tells that a file changed.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) fileStamp {
	if path == "" {
		return fileStamp{}
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{size: -1}
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size()}
}

// tlsSource is a listener's TLS configuration, rebuilt from its files
// when one of them changes: each handshake looks at the files' stamps
// (a stat each, small beside a handshake), and a change loads the pair
// (and the client CAs) again. A pair that does not load (a key not yet
// rewritten beside its new certificate) keeps the configuration in force,
// logged, until the files change again.
type tlsSource struct {
	files  TLSFiles
	protos []string // ALPN protocols the listener speaks
	log    *slog.Logger

	mu    sync.Mutex // serialises checks and reloads
	stamp [3]fileStamp
	cfg   atomic.Pointer[tls.Config]
}

// newTLSSource loads f (an error when it does not load: a start with
// unusable files fails).
func newTLSSource(f TLSFiles, protos []string, log *slog.Logger) (*tlsSource, error) {
	s := &tlsSource{files: f, protos: protos, log: log}
	s.stamp = s.stamps()
	if err := s.load(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *tlsSource) stamps() [3]fileStamp {
	return [3]fileStamp{stampOf(s.files.Cert), stampOf(s.files.Key), stampOf(s.files.ClientCA)}
}

// config is the listener's tls.Config: each handshake gets the
// configuration in force (reloaded first when a file changed).
func (s *tlsSource) config() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: s.protos, GetConfigForClient: s.forClient}
}

func (s *tlsSource) forClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.stamps(); st != s.stamp {
		s.stamp = st
		if err := s.load(); err != nil {
			s.log.Warn("tls: the changed files do not load; the certificate in force stays", "cert", s.files.Cert, "err", err)
		} else {
			s.log.Info("tls: certificate reloaded", "cert", s.files.Cert)
		}
	}
	return s.cfg.Load(), nil
}

// load builds the configuration from the files and puts it in force.
func (s *tlsSource) load() error {
	pair, err := tls.LoadX509KeyPair(s.files.Cert, s.files.Key)
	if err != nil {
		return fmt.Errorf("service: tls certificate %s, key %s: %w", s.files.Cert, s.files.Key, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: s.protos, Certificates: []tls.Certificate{pair}}
	if s.files.ClientCA != "" {
		pem, err := os.ReadFile(s.files.ClientCA)
		if err != nil {
			return fmt.Errorf("service: tls client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return errors.New("service: tls client CA " + s.files.ClientCA + ": no PEM certificate in it")
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	s.cfg.Store(cfg)
	return nil
}

// newTLSIf is newTLSSource when f is enabled, else nil (plaintext).
func newTLSIf(f TLSFiles, protos []string, log *slog.Logger) (*tlsSource, error) {
	if !f.enabled() {
		return nil, nil
	}
	return newTLSSource(f, protos, log)
}

// ALPN protocols of the listeners: net/http's server speaks both; gRPC
// needs h2.
var (
	httpProtos = []string{"h2", "http/1.1"}
	grpcProtos = []string{"h2"}
)

// validateTLS checks the three listeners' TLS flags.
func (c *Config) validateTLS() error {
	for _, l := range []struct {
		f    TLSFiles
		flag string
	}{{c.TLS, "--tls"}, {c.APITLS, "--api-tls"}, {c.GRPCTLS, "--grpc-tls"}} {
		if err := l.f.validate(l.flag); err != nil {
			return err
		}
	}
	if c.APITLS.enabled() && c.Upstream == "" {
		return errors.New("service: --api-tls-* without --upstream: there is no API listener (--tls-* secures --listen, which then serves the API)")
	}
	if c.GRPCTLS.enabled() && c.GRPCListen == "" {
		return errors.New("service: --grpc-tls-* without --grpc-listen")
	}
	return nil
}

// tlsSources loads the listeners' TLS files: the API listener's are
// --api-tls-* in proxy mode, else --tls-* (--listen is then the API).
func (l *limiter) tlsSources() (api, public, grpc *tlsSource, err error) {
	cfg := l.cfg
	apiFiles := cfg.TLS
	if cfg.Upstream != "" {
		apiFiles = cfg.APITLS
		if public, err = newTLSIf(cfg.TLS, httpProtos, l.log); err != nil {
			return nil, nil, nil, err
		}
	}
	if api, err = newTLSIf(apiFiles, httpProtos, l.log); err != nil {
		return nil, nil, nil, err
	}
	if grpc, err = newTLSIf(cfg.GRPCTLS, grpcProtos, l.log); err != nil {
		return nil, nil, nil, err
	}
	return api, public, grpc, nil
}
