package streams

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/tollgate-dev/tollgate/internal/cli"
)

// Auth is how a daemon proves itself to a NATS server that requires it,
// beyond the user:pass@ its URL may carry: a JWT + nkey credentials file
// (nats.go UserCredentials) and the CA that signed the server's
// certificate for tls:// (nats+tls://) URLs. The zero Auth adds nothing.
type Auth struct {
	// CA is a PEM file of CA certificates for the server's certificate
	// ("" trusts the system roots). Setting it requires TLS.
	CA string
	// Creds is a credentials file (JWT and nkey seed, as `nsc` writes it).
	Creds string
}

// Validate checks that the files can be read and that CA holds a
// certificate, so that a daemon refuses to start (exit 2) rather than
// retry a connection that cannot succeed.
func (a Auth) Validate() error {
	if a.CA != "" {
		b, err := os.ReadFile(a.CA)
		if err != nil {
			return fmt.Errorf("streams: nats CA: %w", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(b) {
			return fmt.Errorf("streams: nats CA %s: no PEM certificate", a.CA)
		}
	}
	if a.Creds != "" {
		b, err := os.ReadFile(a.Creds)
		if err != nil {
			return fmt.Errorf("streams: nats credentials: %w", err)
		}
		if !strings.Contains(string(b), "BEGIN NATS USER JWT") || !strings.Contains(string(b), "BEGIN USER NKEY SEED") {
			return fmt.Errorf("streams: nats credentials %s: not a JWT + nkey credentials file", a.Creds)
		}
	}
	return nil
}

// Options are the nats.go options of a.
func (a Auth) Options() []nats.Option {
	var o []nats.Option
	if a.CA != "" {
		o = append(o, nats.RootCAs(a.CA))
	}
	if a.Creds != "" {
		o = append(o, nats.UserCredentials(a.Creds))
	}
	return o
}

// ServerURLs returns a --nats value as nats.go reads it: nats+tls:// is
// spelt tls:// (both require TLS), each of the comma-separated URLs.
func ServerURLs(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if rest, ok := strings.CutPrefix(p, "nats+tls://"); ok {
			p = "tls://" + rest
		}
		parts[i] = p
	}
	return strings.Join(parts, ",")
}

// ValidateURLs checks each comma-separated URL of a --nats value: a
// scheme nats.go speaks (nats, tls, nats+tls, ws, wss) and a host.
func ValidateURLs(s string) error {
	for _, p := range strings.Split(ServerURLs(s), ",") {
		u, err := url.Parse(p)
		if err != nil {
			return fmt.Errorf("streams: nats url %s: %w", RedactURL(p), errors.Unwrap(err))
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("streams: nats url %s: scheme %q (want nats://, tls:// or nats+tls://)", RedactURL(p), u.Scheme)
		}
		if u.Host == "" {
			return fmt.Errorf("streams: nats url %s: no host", RedactURL(p))
		}
	}
	return nil
}

// RedactURL masks the user information (a password, a token) of each of
// the comma-separated URLs of s, for logs and errors.
func RedactURL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		j := strings.Index(p, "://")
		if at := strings.LastIndexByte(p, '@'); j >= 0 && at > j {
			parts[i] = p[:j+3] + "***@" + p[at+1:]
		}
	}
	return strings.Join(parts, ",")
}

// AuthFlags are the --nats-ca and --nats-creds flags, bound to ca and
// creds, that every command reading --nats declares (the limiter, riskd,
// limiter replay), so that their names, variables and help agree.
func AuthFlags(ca, creds *string) []cli.Flag {
	return []cli.Flag{
		cli.String(ca, "nats-ca", "TOLLGATE_NATS_CA", "", "FILE", "PEM CA certificates a TLS NATS server's certificate must chain to (default: the system roots)"),
		cli.String(creds, "nats-creds", "TOLLGATE_NATS_CREDS", "", "FILE", "NATS credentials file (user JWT and nkey seed) to connect with"),
	}
}
