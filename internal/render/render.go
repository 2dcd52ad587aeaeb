// Package render writes a decision as the check API answers it: the
// error envelope, the rate-limit headers (X-RateLimit-*, the IETF
// RateLimit fields, Retry-After) and each denial's status and details.
// api (the check API, the reverse proxy, forward auth) and rls (the Envoy
// rate-limit service, which relays the same headers and envelope) render
// through it, so a decision reads the same whichever way it left.
package render

import (
	"net/http"
	"strconv"
	"time"

	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/internal/jsonw"
	"github.com/tollgate-dev/tollgate/policy"
)

// The envelope's codes of a denial (api lists every code).
const (
	CodeRateLimited        = "RATE_LIMITED"
	CodeAccountLocked      = "ACCOUNT_LOCKED"
	CodeStepUpRequired     = "STEP_UP_REQUIRED"
	CodeDenied             = "DENIED"
	CodeLimiterUnavailable = "LIMITER_UNAVAILABLE"
)

// HeaderTollgateStatus carries the real status of a denial answered 403
// (forward auth with ?status=403; Envoy denials).
const HeaderTollgateStatus = "X-Tollgate-Status"

// The rate-limit response fields in the contract's spelling. net/http's
// Header.Set and Add canonicalise a name ("X-Ratelimit-Limit",
// "Ratelimit"), so Tollgate writes these keys into the header map
// directly: on HTTP/1.1 the wire then shows exactly these names (HTTP/2
// lower-cases every name anyway). Field names are case-insensitive, so a
// client matching either spelling works; Go code reading a response that
// crossed the wire finds them with Header.Get as usual, while code reading
// a handler's own header map (an httptest.ResponseRecorder) must index it
// with these keys.
const (
	HeaderLimit     = "X-RateLimit-Limit"
	HeaderRemaining = "X-RateLimit-Remaining"
	HeaderReset     = "X-RateLimit-Reset"
	HeaderDegraded  = "X-RateLimit-Degraded"
	HeaderRateLimit = "RateLimit"
	HeaderPolicy    = "RateLimit-Policy"
)

// LimitHeaders lists the rate-limit fields above, for code that copies or
// strips them.
var LimitHeaders = []string{HeaderLimit, HeaderRemaining, HeaderReset, HeaderRateLimit, HeaderPolicy, HeaderDegraded}

// WriteError writes the error envelope
// {"error": {"code", "message", "details", "request_id"}} with status.
// details is the body of the details object without its braces ("" for
// none), e.g. `"retry_after_ms":1000`, built with jsonw.AppendMember.
func WriteError(w http.ResponseWriter, rid string, status int, code, message, details string) {
	b := make([]byte, 0, 256)
	b = append(b, `{"error":{"code":`...)
	b = jsonw.AppendString(b, code)
	b = append(b, `,"message":`...)
	b = jsonw.AppendString(b, message)
	b = append(b, `,"details":{`...)
	b = append(b, details...)
	b = append(b, `},"request_id":`...)
	b = jsonw.AppendString(b, rid)
	b = append(b, "}}\n"...)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// WriteDecision applies d to a response. When the request may proceed
// (allowed or degraded) it sets the rate-limit headers (and
// X-RateLimit-Degraded) and returns true without writing a status or
// body; otherwise it writes the complete denial (429, 403 or 503 with the
// envelope and headers) and returns false. Every way a decision leaves
// (the check API, the reverse proxy, forward auth, the middleware, the
// Envoy rate-limit service) renders it here, so every denial looks the
// same.
func WriteDecision(w http.ResponseWriter, rid string, d *engine.Decision) bool {
	h := w.Header()
	var scratch [192]byte
	b := scratch[:0] // the envelope's details, member by member
	switch d.Outcome {
	case engine.DeniedList:
		b = jsonw.AppendString(jsonw.AppendMember(b, "list"), d.List.Name)
		WriteError(w, rid, http.StatusForbidden, CodeDenied, "Request denied", string(b))
	case engine.Allowed, engine.Degraded, engine.AllowedList:
		if d.Outcome == engine.Degraded {
			h[HeaderDegraded] = []string{"1"}
		}
		SetLimitHeaders(h, d)
		return true
	case engine.Limited:
		SetLimitHeaders(h, d)
		SetRetryAfter(h, d.RetryAfter)
		b = jsonw.AppendInt(jsonw.AppendMember(b, "retry_after_ms"), CeilMS(d.RetryAfter))
		if d.Binding != nil {
			b = jsonw.AppendString(jsonw.AppendMember(b, "limit"), d.Binding.Name)
			b = jsonw.AppendString(jsonw.AppendMember(b, "scope"), d.Binding.PartName(0))
			if d.Binding.Kind != policy.KindBucket {
				b = jsonw.AppendString(jsonw.AppendMember(b, "kind"), d.Binding.Kind.String())
			}
		}
		WriteError(w, rid, http.StatusTooManyRequests, CodeRateLimited, "Too many requests", string(b))
	case engine.Locked:
		setLockHeaders(h, d)
		SetRetryAfter(h, d.RetryAfter)
		b = jsonw.AppendInt(jsonw.AppendMember(b, "retry_after_ms"), CeilMS(d.RetryAfter))
		b = jsonw.AppendString(jsonw.AppendMember(b, "rule"), d.Lock.Rule)
		b = jsonw.AppendString(jsonw.AppendMember(b, "scope"), d.LockScope)
		WriteError(w, rid, http.StatusTooManyRequests, CodeAccountLocked, "Account temporarily locked after repeated failed logins", string(b))
	case engine.StepUp:
		b = jsonw.AppendString(jsonw.AppendMember(b, "rule"), d.Lock.Rule)
		b = jsonw.AppendString(jsonw.AppendMember(b, "scope"), d.LockScope)
		b = append(jsonw.AppendMember(b, "expires_at"), '"')
		b = append(d.Lock.Until.UTC().AppendFormat(b, time.RFC3339), '"')
		WriteError(w, rid, http.StatusForbidden, CodeStepUpRequired, "Additional verification required", string(b))
	case engine.Unavailable:
		SetRetryAfter(h, d.RetryAfter)
		b = jsonw.AppendInt(jsonw.AppendMember(b, "retry_after_ms"), CeilMS(d.RetryAfter))
		WriteError(w, rid, http.StatusServiceUnavailable, CodeLimiterUnavailable, "Rate limiter unavailable", string(b))
	}
	return false
}

// SetLimitHeaders sets X-RateLimit-* and the IETF RateLimit fields for
// the binding limit.
func SetLimitHeaders(h http.Header, d *engine.Decision) {
	if d.Binding == nil {
		return
	}
	reset := CeilUnix(d.Reset)
	limit := strconv.FormatInt(d.Limit, 10)
	remaining := strconv.FormatInt(d.Remaining, 10)
	h[HeaderLimit] = []string{limit}
	h[HeaderRemaining] = []string{remaining}
	h[HeaderReset] = []string{strconv.FormatInt(reset, 10)}
	tsec := ceilSeconds(d.Reset.Sub(d.Now))
	name := string(AppendSFString(nil, d.Binding.Name))
	w := int64(d.Window / time.Second)
	if w < 1 {
		w = 1
	}
	h[HeaderPolicy] = []string{name + ";q=" + limit + ";w=" + strconv.FormatInt(w, 10)}
	h[HeaderRateLimit] = []string{name + ";r=" + remaining + ";t=" + strconv.FormatInt(tsec, 10)}
}

// setLockHeaders sets the rate-limit fields of a lockout: no bucket
// binds, so the lockout's rule does, with nothing left (q=0, r=0) until
// it lifts: X-RateLimit-Reset is its end, and the IETF fields' t (and w,
// the one window there is) the seconds until then, as Retry-After.
func setLockHeaders(h http.Header, d *engine.Decision) {
	h[HeaderLimit] = []string{"0"}
	h[HeaderRemaining] = []string{"0"}
	h[HeaderReset] = []string{strconv.FormatInt(CeilUnix(d.Lock.Until), 10)}
	left := strconv.FormatInt(max(1, ceilSeconds(d.RetryAfter)), 10)
	name := string(AppendSFString(nil, d.Lock.Rule))
	h[HeaderPolicy] = []string{name + ";q=0;w=" + left}
	h[HeaderRateLimit] = []string{name + ";r=0;t=" + left}
}

// AppendSFString appends s as a structured-field string (RFC 8941).
func AppendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		b = append(b, c)
	}
	return append(b, '"')
}

// SetRetryAfter sets Retry-After: whole seconds, rounded up, at least 1.
func SetRetryAfter(h http.Header, d time.Duration) {
	h["Retry-After"] = []string{strconv.FormatInt(max(1, ceilSeconds(d)), 10)}
}

// ceilSeconds is d in whole seconds, rounded up; 0 when d is not positive.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// CeilMS is d in milliseconds, rounded up.
func CeilMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// CeilUnix is t in Unix seconds, rounded up.
func CeilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// capture is an http.ResponseWriter that keeps what it is given.
type capture struct {
	h      http.Header
	status int
	body   []byte
}

func (c *capture) Header() http.Header { return c.h }

func (c *capture) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}

func (c *capture) Write(b []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	c.body = append(c.body, b...)
	return len(b), nil
}

// Decision renders d into h and a body: for a request that may proceed
// (allowed, degraded) it sets the rate-limit headers and returns 200 and
// no body; for a denial it sets the denial's headers and returns its
// status (429, 403, 503) and envelope. Gateways that relay an answer in
// their own protocol (the Envoy rate-limit service) use it.
func Decision(h http.Header, rid string, d *engine.Decision) (status int, body []byte) {
	c := &capture{h: h}
	if WriteDecision(c, rid, d) {
		return http.StatusOK, nil
	}
	return c.status, c.body
}

// Capture is an http.ResponseWriter that keeps the body written to it, its
// headers being H and its status the caller's: an envelope rendered to be
// carried elsewhere (Envoy's raw_body, forward auth's X-Tollgate-Envelope).
type Capture struct {
	H    http.Header
	Body []byte
}

// Header implements http.ResponseWriter.
func (c *Capture) Header() http.Header { return c.H }

// WriteHeader implements http.ResponseWriter: the status is not kept.
func (c *Capture) WriteHeader(int) {}

// Write implements http.ResponseWriter.
func (c *Capture) Write(b []byte) (int, error) {
	c.Body = append(c.Body, b...)
	return len(b), nil
}
