package service

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// httpConfig configures one HTTP listener component.
type httpConfig struct {
	// Addr is the listen address (host:port; ":0" picks a port).
	Addr string
	// Server serves the listener: its handler and timeouts (required).
	Server *http.Server
	// Drain bounds the drain of in-flight requests when ctx ends (0: they
	// are cut at once).
	Drain time.Duration
	// AfterDrain, when set, runs once the listener has drained (the proxy
	// waits there for the reports of the requests it served).
	AfterDrain func()
	// TLS, when set, makes the listener speak TLS (nil: plaintext).
	TLS *tlsSource
	// Logger, when set, is told of a drain that timed out (nil: silent).
	Logger *slog.Logger
}

// Validate checks the address and that a server with a handler is given.
func (c httpConfig) Validate() error {
	if c.Server == nil || c.Server.Handler == nil {
		return errors.New("service: http listener without a handler")
	}
	if c.Drain < 0 {
		return fmt.Errorf("service: drain timeout %v must not be negative", c.Drain)
	}
	return checkAddr("listen address", c.Addr)
}

// httpListener is a bound HTTP listener; Run serves it until ctx ends,
// then drains it.
type httpListener struct {
	c  httpConfig
	ln net.Listener
}

var _ component = (*httpListener)(nil)

// newHTTP validates c and binds its address.
func newHTTP(c httpConfig) (*httpListener, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return nil, fmt.Errorf("service: listen %s: %w", c.Addr, err)
	}
	if c.TLS != nil {
		ln = tls.NewListener(ln, c.TLS.config())
	}
	return &httpListener{c: c, ln: ln}, nil
}

// addr is the bound address.
func (l *httpListener) addr() string { return l.ln.Addr().String() }

// Run serves until ctx ends or serving fails; when ctx ends in-flight
// requests finish (up to Drain), then the rest are cut: a warning, not an
// error, since the stop did what it was asked within its bound (before,
// Run returned the drain's deadline, and a SIGTERM that cut a request
// exited 1, the gRPC listener's 0).
func (l *httpListener) Run(ctx context.Context) error {
	served := make(chan error, 1)
	go func() { served <- l.c.Server.Serve(l.ln) }()
	select {
	case err := <-served:
		_ = l.c.Server.Close()
		return err // never ErrServerClosed: only Run shuts it down
	case <-ctx.Done():
	}
	if l.c.Drain == 0 {
		_ = l.c.Server.Close()
		<-served
		return nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.c.Drain)
	defer cancel()
	if err := l.c.Server.Shutdown(sctx); err != nil {
		_ = l.c.Server.Close()
		l.cutWarning()
	}
	var err error
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = serr
	}
	if l.c.AfterDrain != nil {
		l.c.AfterDrain()
	}
	return err
}

// cutWarning logs that the drain timed out and what was left was cut.
func (l *httpListener) cutWarning() {
	if l.c.Logger != nil {
		l.c.Logger.Warn("drain timed out: the requests still in flight were cut", "addr", l.addr(), "timeout", l.c.Drain.String())
	}
}

// apiServer is the limiter's listener server: bounded header, read, write
// and idle times; on the public listener of proxy mode the read and write
// deadlines are set per request by the handler (the body's BodyTimeout,
// from arrival; a forwarded response's idle deadline).
func apiServer(h http.Handler, public bool, log *slog.Logger) *http.Server {
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       httpIdleTimeout,
		MaxHeaderBytes:    httpMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if public {
		// no total deadline on the public listener: api.Server.Public
		// bounds each answer's writes, and the proxy a streamed response's
		// silences (--proxy-idle-timeout, 7.5)
		hs.ReadTimeout, hs.WriteTimeout = 0, 0
	}
	return hs
}

// pprofServer serves net/http/pprof (keep it on loopback).
func pprofServer() *http.Server {
	pm := http.NewServeMux()
	pm.HandleFunc("/debug/pprof/", pprof.Index)
	pm.HandleFunc("/debug/pprof/profile", pprof.Profile)
	pm.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	pm.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return &http.Server{Handler: pm, ReadHeaderTimeout: httpReadHeaderTimeout}
}
