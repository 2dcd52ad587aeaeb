package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Defaults of Transport's zero fields.
const (
	// DefaultMaxAttempts is the default bound on attempts, the first included.
	DefaultMaxAttempts = 4
	// DefaultBaseDelay is the default backoff cap of the first retry.
	DefaultBaseDelay = 200 * time.Millisecond
	// DefaultMaxDelay is the default bound on the backoff cap.
	DefaultMaxDelay = 30 * time.Second
	// DefaultMaxWait is the default longest server-asked wait honoured.
	DefaultMaxWait = 60 * time.Second
)

// maxPeek bounds the bytes of a response body RetryAfter reads looking
// for the envelope (the limiter's bodies are far smaller).
const maxPeek = 64 << 10

// maxDrain bounds the bytes read from a retried response before it is
// closed; a longer body costs the connection instead of the time.
const maxDrain = 256 << 10

// Transport is an http.RoundTripper that waits and retries on 429 Too Many
// Requests and 503 Service Unavailable, as the package comment describes.
//
// The zero value is usable: it wraps http.DefaultTransport with the
// defaults below, but, a bool's zero value being false, it retries 429
// only; NewTransport returns one that also retries 503. A Transport is safe
// for concurrent use when Base, Rand and Sleep are; do not change its
// fields while it is in use.
//
// Set an http.Client's Timeout (or a context deadline) with the waits in
// mind: they count against it. When the context's deadline would pass
// before the next attempt, the Transport returns the last 429 or 503 at
// once instead of waiting in vain.
type Transport struct {
	// Base sends each attempt (default http.DefaultTransport).
	Base http.RoundTripper
	// MaxAttempts bounds the attempts, the first included (default 4;
	// 1 disables retries).
	MaxAttempts int
	// BaseDelay is the backoff cap of the first retry; it doubles with
	// each retry (default 200ms).
	BaseDelay time.Duration
	// MaxDelay bounds the backoff cap (default 30s). It does not shorten a
	// wait the server asked for.
	MaxDelay time.Duration
	// MaxWait is the longest single server-asked wait honoured (default
	// 60s). When the server asks for longer (a lockout, say), the Transport
	// gives up and returns that response.
	MaxWait time.Duration
	// Rand returns a number in [0, 1) for the jitter (default
	// math/rand/v2.Float64). It is a seam for tests.
	Rand func() float64
	// Sleep waits d or until ctx ends, returning ctx.Err() in the latter
	// case (default: a timer that honours ctx). It is a seam for tests.
	Sleep func(ctx context.Context, d time.Duration) error
	// RetryOn503 also retries 503 Service Unavailable (the limiter answers
	// 503 LIMITER_UNAVAILABLE when its store is down and a limit fails
	// closed). NewTransport sets it; the zero value retries 429 only.
	RetryOn503 bool
}

var _ http.RoundTripper = (*Transport)(nil)

// NewTransport returns a Transport over base (nil: http.DefaultTransport)
// with every default, RetryOn503 included.
func NewTransport(base http.RoundTripper) *Transport {
	return &Transport{Base: base, RetryOn503: true}
}

// RoundTrip sends req, waiting and retrying on 429 (and 503 when
// RetryOn503) as long as the request may be retried and attempts remain.
// It returns the first response that is not retried: a success, any other
// status, a 429 ACCOUNT_LOCKED (never retried: see Wait), or the last 429
// or 503 with its body intact. Bodies of retried
// attempts are drained and closed. When the request's context ends during
// a wait, RoundTrip returns ctx.Err().
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if !Replayable(req) {
		return base.RoundTrip(req)
	}
	ctx := req.Context()
	maxAttempts := t.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = DefaultMaxAttempts
	}
	r := req
	for attempt := 0; ; attempt++ {
		resp, err := base.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		if !t.retryStatus(resp.StatusCode) || attempt+1 >= maxAttempts {
			return resp, nil
		}
		wait, ok := t.Wait(resp, attempt)
		if !ok {
			return resp, nil
		}
		if dl, has := ctx.Deadline(); has && time.Until(dl) < wait {
			return resp, nil
		}
		drain(resp.Body)
		if err := t.sleep(ctx, wait); err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if r, err = replay(req); err != nil {
			return nil, err
		}
	}
}

// Wait returns how long to wait before retry attempt (0 for the first
// retry) after resp: the server's time (RetryAfter) plus the full-jitter
// backoff, or the backoff alone when the server named no time. ok is false when the server asked for longer than
// MaxWait, or when resp is a lockout (the envelope's code
// ACCOUNT_LOCKED, however short the lockout left): then the caller should
// give up and tell the user. Wait may replace resp.Body (see RetryAfter).
func (t *Transport) Wait(resp *http.Response, attempt int) (wait time.Duration, ok bool) {
	server, has, code := retryAfter(resp)
	if code == CodeAccountLocked {
		return 0, false
	}
	maxWait := t.MaxWait
	if maxWait <= 0 {
		maxWait = DefaultMaxWait
	}
	if has && server > maxWait {
		return 0, false
	}
	if !has {
		return t.Backoff(attempt), true
	}
	// the jitter comes on top of the server's time, never under it: a
	// crowd told the same time at the same moment spreads out after it
	// (with max(server, jitter), a server time above the jitter's cap
	// brought every client back at the same instant)
	jitter := t.Backoff(attempt)
	if server > math.MaxInt64-jitter {
		return math.MaxInt64, true
	}
	return server + jitter, true
}

// Backoff returns the full-jitter backoff of retry attempt (0 for the
// first retry): Rand() times min(MaxDelay, BaseDelay * 2^attempt).
func (t *Transport) Backoff(attempt int) time.Duration {
	baseDelay, maxDelay := t.BaseDelay, t.MaxDelay
	if baseDelay <= 0 {
		baseDelay = DefaultBaseDelay
	}
	if maxDelay <= 0 {
		maxDelay = DefaultMaxDelay
	}
	capped := min(baseDelay, maxDelay)
	for i := 0; i < attempt && capped < maxDelay; i++ {
		if capped > maxDelay/2 {
			capped = maxDelay
			break
		}
		capped *= 2
	}
	rnd := rand.Float64
	if t.Rand != nil {
		rnd = t.Rand
	}
	f := rnd()
	if !(f > 0) { // also NaN
		return 0
	}
	if f > 1 {
		f = 1
	}
	return time.Duration(f * float64(capped))
}

// retryStatus reports whether a response with this status is retried.
func (t *Transport) retryStatus(code int) bool {
	return code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable && t.RetryOn503
}

// sleep waits d with the Sleep seam or a timer.
func (t *Transport) sleep(ctx context.Context, d time.Duration) error {
	if t.Sleep != nil {
		return t.Sleep(ctx, d)
	}
	return sleepCtx(ctx, d)
}

// CloseIdleConnections closes the idle connections of Base when it can,
// so http.Client.CloseIdleConnections reaches through the Transport.
func (t *Transport) CloseIdleConnections() {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if c, ok := base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// Replayable reports whether the Transport may send req more than once:
// its body can be replayed (none, or GetBody set) and its method is
// idempotent (GET, HEAD, OPTIONS, PUT, DELETE) or it carries an
// Idempotency-Key header.
func Replayable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete:
		return true
	}
	return req.Header.Get("Idempotency-Key") != ""
}

// replay returns a copy of req with a fresh body for another attempt.
func replay(req *http.Request) (*http.Request, error) {
	r := req.Clone(req.Context())
	if req.Body == nil || req.Body == http.NoBody {
		return r, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("client: replay the body of %s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	r.Body = body
	return r, nil
}

// drain reads what is left of a body, up to maxDrain bytes, and closes it,
// so the connection can be reused.
func drain(body io.ReadCloser) {
	if body == nil {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(body, maxDrain))
	_ = body.Close()
}

// RetryAfter returns the wait the server asked for in resp, and whether it
// asked. It prefers the error envelope's error.details.retry_after_ms
// (exact milliseconds) and falls back to the Retry-After header: whole
// seconds, or an HTTP date measured from the response's Date header (the
// server's clock, so a phone's skewed clock does not matter), else from
// the local clock. A time in the past is a wait of 0.
//
// To read the envelope, RetryAfter reads the body (up to 64 KiB) and
// replaces resp.Body with one that yields the same bytes, so the body stays
// readable and closing it closes the original.
func RetryAfter(resp *http.Response) (time.Duration, bool) {
	d, ok, _ := retryAfter(resp)
	return d, ok
}

// CodeAccountLocked is the envelope code of a lockout (429): the
// Transport never retries it, since only the user can act on it (a
// password reset, support, or waiting it out knowingly).
const CodeAccountLocked = "ACCOUNT_LOCKED"

// retryAfter is RetryAfter, also returning the envelope's error code
// ("" when the body is no envelope).
func retryAfter(resp *http.Response) (time.Duration, bool, string) {
	if resp == nil {
		return 0, false, ""
	}
	d, ok, code := envelopeRetryAfter(resp)
	if ok {
		return d, true, code
	}
	d, ok = headerRetryAfter(resp.Header)
	return d, ok, code
}

// replayBody yields peeked bytes, then the rest of the original body.
type replayBody struct {
	io.Reader
	io.Closer
}

// envelopeRetryAfter reads error.details.retry_after_ms and error.code
// from the body.
func envelopeRetryAfter(resp *http.Response) (time.Duration, bool, string) {
	if resp.Body == nil || resp.Body == http.NoBody {
		return 0, false, ""
	}
	orig := resp.Body
	buf, err := io.ReadAll(io.LimitReader(orig, maxPeek+1))
	resp.Body = replayBody{io.MultiReader(bytes.NewReader(buf), orig), orig}
	if err != nil || len(buf) > maxPeek {
		return 0, false, ""
	}
	trimmed := bytes.TrimLeft(buf, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return 0, false, ""
	}
	var env struct {
		Error *struct {
			Code    string                     `json:"code"`
			Details map[string]json.RawMessage `json:"details"`
		} `json:"error"`
	}
	if json.Unmarshal(buf, &env) != nil || env.Error == nil {
		return 0, false, ""
	}
	code := env.Error.Code
	raw, ok := env.Error.Details["retry_after_ms"]
	if !ok {
		return 0, false, code
	}
	ms, perr := strconv.ParseFloat(string(raw), 64)
	if perr != nil || math.IsNaN(ms) {
		return 0, false, code
	}
	return durationOf(ms, float64(time.Millisecond)), true, code
}

// headerRetryAfter parses Retry-After: delay-seconds or an HTTP date.
func headerRetryAfter(h http.Header) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if allDigits(v) {
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, false
		}
		return durationOf(secs, float64(time.Second)), true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	now := time.Now()
	if date, err := http.ParseTime(h.Get("Date")); err == nil {
		now = date
	}
	return max(at.Sub(now), 0), true
}

// durationOf converts n units to a Duration, clamped to [0, MaxInt64].
func durationOf(n, unit float64) time.Duration {
	ns := n * unit
	switch {
	case !(ns > 0):
		return 0
	case ns >= math.MaxInt64:
		return math.MaxInt64
	}
	return time.Duration(math.Ceil(ns))
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
