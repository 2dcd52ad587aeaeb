package middleware

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/api"
)

// releaseTimeout bounds the release of a request's concurrency slots
// after the wrapped handler returned (its context may be gone by then).
const releaseTimeout = 5 * time.Second

// leaseOf returns the lease_id of a 200 check answer ("" when none).
func leaseOf(answer []byte) string {
	if !bytes.Contains(answer, []byte(`"lease_id"`)) {
		return ""
	}
	var a struct {
		LeaseID string `json:"lease_id"`
	}
	if json.Unmarshal(answer, &a) != nil {
		return ""
	}
	return a.LeaseID
}

// releaseDirect frees a lease through the in-process engine. A failure is
// logged; the lease then expires after its lease_ttl.
func (l *limiter) releaseDirect(rid, lease string) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if _, err := l.eng.Release(ctx, lease); err != nil {
		l.log.LogAttrs(ctx, slog.LevelWarn, "release", slog.String("request_id", rid), slog.String("err", err.Error()))
	}
}

// releaseRemote frees a lease with POST /v1/release on the limiter that
// answered the check. A failure is logged (throttled like the checks');
// the lease then expires after its lease_ttl.
func (l *limiter) releaseRemote(rid, lease string) {
	ctx, cancel := context.WithTimeout(context.Background(), max(l.timeout, releaseTimeout))
	defer cancel()
	body := api.AppendJSONString([]byte(`{"lease_id":`), lease)
	body = append(body, '}')
	url := strings.TrimSuffix(l.checkURL, "/v1/check") + "/v1/release"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err == nil {
		req.Header["Content-Type"] = []string{"application/json"}
		req.Header["X-Request-Id"] = []string{rid}
		if l.auth != nil {
			req.Header["Authorization"] = l.auth
		}
		var resp *http.Response
		if resp, err = l.client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
				err = &statusError{resp.StatusCode}
			}
		}
	}
	if err != nil {
		if n, ok := l.throttle.Allow(l.now()); ok {
			l.log.LogAttrs(ctx, slog.LevelWarn, "release", slog.String("request_id", rid), slog.String("err", err.Error()), slog.Int64("suppressed", n))
		}
	}
}

// statusError is a release answered with an unexpected status.
type statusError struct{ status int }

func (e *statusError) Error() string {
	return "middleware: release answered " + http.StatusText(e.status)
}

// serveHolding calls next holding a concurrency slot, which release
// frees (once): when next returns, or, when next hijacked the connection
// (a WebSocket upgrade) and returned normally, when that connection is
// closed. Handlers that hand a hijacked connection to goroutines and
// return at once (gorilla/websocket's examples do) so keep their slot
// for the socket's life; a socket never closed keeps it until the
// limit's lease_ttl. A panic in next releases at once.
func serveHolding(w http.ResponseWriter, r *http.Request, next http.Handler, release func()) {
	lw := &leaseWriter{ResponseWriter: w, release: sync.OnceFunc(release)}
	returned := false
	defer func() {
		if !returned || !lw.hijacked.Load() {
			lw.release()
		}
	}()
	next.ServeHTTP(lw, r)
	returned = true
}

// leaseWriter is the ResponseWriter of a request holding a concurrency
// slot: it passes Flush, Hijack and Unwrap (http.ResponseController)
// through, and ties the slot to a hijacked connection.
type leaseWriter struct {
	http.ResponseWriter
	release  func()
	hijacked atomic.Bool
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *leaseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush flushes the underlying writer when it can.
func (w *leaseWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Hijack hijacks the underlying connection; closing the connection it
// returns frees the slot.
func (w *leaseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.hijacked.Store(true)
	return &leaseConn{Conn: c, release: w.release}, rw, nil
}

// leaseConn is a hijacked connection whose Close frees its slot.
type leaseConn struct {
	net.Conn
	release func()
}

// Close closes the connection and frees the slot, in the background (a
// remote release may take up to the release timeout; Close does not wait
// for it).
func (c *leaseConn) Close() error {
	err := c.Conn.Close()
	go c.release()
	return err
}
