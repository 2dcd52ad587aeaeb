package api

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Error codes of the proxy's own answers to an upstream that failed.
const (
	CodeUpstreamUnavailable = "UPSTREAM_UNAVAILABLE"
	CodeUpstreamTimeout     = "UPSTREAM_TIMEOUT"
)

// Defaults of ProxyOptions' deadlines (service/defaults.go shows them).
const (
	// DefaultUpstreamTimeout is how long the upstream may take to answer.
	DefaultUpstreamTimeout = 60 * time.Second
	// DefaultProxyIdleTimeout is how long a proxied response may go
	// without a byte moving.
	DefaultProxyIdleTimeout = 60 * time.Second
)

// NewUpstreamTransport is the proxy's client of the upstream: net/http's
// Transport, tuned for one busy upstream (a large idle pool, keep-alive,
// HTTP/2 when the upstream offers it over TLS). It has no deadline of
// its own past the dial: the proxy bounds the wait for the answer
// (UpstreamTimeout) and the silences of its body (IdleTimeout).
func NewUpstreamTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
	}
}

// Causes of a proxied request's context ending by the proxy's deadlines.
var (
	errUpstreamTimeout = errors.New("api: the upstream did not answer within the upstream timeout")
	errUpstreamIdle    = errors.New("api: the proxied response moved no byte within the idle timeout")
)

// watchdog holds a proxied request's deadlines: until the upstream
// answers, the upstream timeout; then, for as long as the response
// streams, an idle deadline renewed as bytes move, both on the upstream
// side (the request's context is cancelled when it passes) and on the
// client's (the connection's write deadline). There is no total one.
type watchdog struct {
	t        *time.Timer
	rc       *http.ResponseController
	idle     time.Duration
	answered atomic.Bool
	last     time.Time // of the last renewal (the copying goroutine's)
}

// forward sends r (allowed, with its identity in the context) to the
// upstream and streams the answer back under the watchdog's deadlines.
// When it returns the response is over (written, failed or cut).
func (p *proxy) forward(w http.ResponseWriter, r *http.Request, id *identity) {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	wd := &watchdog{rc: http.NewResponseController(w), idle: p.o.IdleTimeout}
	wd.t = time.AfterFunc(p.o.UpstreamTimeout, func() {
		if wd.answered.Load() {
			cancel(errUpstreamIdle)
		} else {
			cancel(errUpstreamTimeout)
		}
	})
	defer wd.t.Stop()
	// the answer (or the error envelope) must get out within this
	_ = wd.rc.SetWriteDeadline(time.Now().Add(p.o.UpstreamTimeout + p.o.IdleTimeout))
	id.wd = wd
	p.rp.ServeHTTP(w, r.WithContext(ctx))
}

// started is called with the upstream's answer (ModifyResponse): from
// now on the idle deadline applies, renewed by every read of the body. An
// upgraded connection (101) belongs to the client and the upstream: no
// deadline of the proxy's.
func (wd *watchdog) started(resp *http.Response) {
	wd.answered.Store(true)
	if resp.StatusCode == http.StatusSwitchingProtocols {
		wd.t.Stop()
		_ = wd.rc.SetWriteDeadline(time.Time{})
		return
	}
	wd.renew(time.Now())
	resp.Body = &idleBody{ReadCloser: resp.Body, wd: wd}
}

// renew moves both idle deadlines to now + idle. It is called per read
// of the body, so it renews at most once per idle/16: the deadlines in
// force are between 15/16 and all of the idle timeout away.
func (wd *watchdog) renew(now time.Time) {
	if now.Sub(wd.last) < wd.idle/16 {
		return
	}
	wd.last = now
	wd.t.Reset(wd.idle)
	_ = wd.rc.SetWriteDeadline(now.Add(wd.idle))
}

// idleBody is the upstream's response body, renewing the watchdog's idle
// deadlines as bytes arrive (each is written to the client before the
// next read).
type idleBody struct {
	io.ReadCloser
	wd *watchdog
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.wd.renew(time.Now())
	}
	return n, err
}

// upstreamError is the envelope for an upstream round trip that failed:
// 504 UPSTREAM_TIMEOUT when it did not answer within the upstream
// timeout (or the request's own deadline passed), else 502
// UPSTREAM_UNAVAILABLE (refused, reset, a malformed answer).
func upstreamError(r *http.Request, err error) *apiError {
	if errors.Is(context.Cause(r.Context()), errUpstreamTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return &apiError{status: http.StatusGatewayTimeout, code: CodeUpstreamTimeout, message: "the upstream did not answer in time"}
	}
	return &apiError{status: http.StatusBadGateway, code: CodeUpstreamUnavailable, message: "upstream unavailable"}
}

// clientGone reports whether r's context ended because the client went
// away (its connection closed, its stream reset): cancelled, and not by
// one of the proxy's deadlines, whose causes are errUpstreamTimeout and
// errUpstreamIdle.
func clientGone(r *http.Request) bool {
	return errors.Is(context.Cause(r.Context()), context.Canceled)
}

// hasBody reports whether req carries a body (net/http's NoBody is none).
func hasBody(req *http.Request) bool { return req.Body != nil && req.Body != http.NoBody }

// CloseUpstream closes the proxy's idle connections to the upstream (a
// stopped limiter leaves none behind); the proxy still works after it.
func (s *Server) CloseUpstream() {
	if s.proxy == nil {
		return
	}
	if c, ok := s.proxy.o.Transport.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
