package middleware

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tollgate-dev/tollgate/api"
	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/internal/jsonw"
	"github.com/tollgate-dev/tollgate/internal/logthrottle"
	"github.com/tollgate-dev/tollgate/policy"
)

// DefaultTimeout is the default deadline of a remote check.
const DefaultTimeout = 100 * time.Millisecond

// unavailableRetry is the Retry-After of the middleware's own 503, the same
// hint the limiter gives (engine.Options.UnavailableRetry's default).
const unavailableRetry = time.Second

// Sentinel errors of New.
var (
	// ErrNoIdentify means Options.Identify is nil.
	ErrNoIdentify = errors.New("middleware: Options.Identify is required")
	// ErrMode means neither or both of Options.Engine and
	// Options.LimiterURL are set.
	ErrMode = errors.New("middleware: set exactly one of Options.Engine (direct) and Options.LimiterURL (remote)")
	// ErrLimiterURL means Options.LimiterURL is not an http(s) URL.
	ErrLimiterURL = errors.New("middleware: Options.LimiterURL must be an http or https URL")
)

// Identity is who is calling. IP is required (IPv4 or IPv6); the others
// are optional and, as in the check API, at most 256 bytes of UTF-8
// without control characters. A non-empty UserID means authenticated.
type Identity struct {
	// IP is the client's address (see RemoteIP).
	IP string
	// UserID is the authenticated user ("" when anonymous).
	UserID string
	// DeviceID is the app install's device id, if the app sends one.
	DeviceID string
	// DeviceToken is the device token the app got from attestation
	// (contract 6.3), if it sends one (e.g. in X-Device-Token): only with
	// a valid one does the device count as attested.
	DeviceToken string
	// Account is the account a login or token request is for (class auth
	// routes), e.g. the username in the body; it is normalised
	// (policy.NormalizeAccount) like every account.
	Account string
	// Attributes are the request's attributes (plan, tenant, ...: the
	// policy's attr:NAME key parts and if.attr conditions); at most 16,
	// checked as the check API checks them. The middleware only reads the
	// map; do not change it afterwards (decision events may hold it).
	Attributes map[string]string
}

// Options configures the middleware. Set exactly one of Engine and
// LimiterURL.
type Options struct {
	// Engine selects direct mode: decisions are made in process, with the
	// engine's bucket store and policy. A store outage is handled by the
	// policy's failure_mode, as in the limiter.
	Engine *engine.Engine
	// LimiterURL selects remote mode: the base URL of a running limiter,
	// e.g. "http://127.0.0.1:8080"; the middleware POSTs to
	// LimiterURL + "/v1/check".
	LimiterURL string
	// APIToken is the limiter's --api-token, sent as a bearer token with
	// every remote check ("" sends none). Remote mode's answer to a 401
	// is FailOpen's.
	APIToken string
	// HTTPClient makes the remote calls (default: a client of its own with
	// keep-alive connections that does not follow redirects). Do not give
	// it a retrying transport: the check is on the request path.
	HTTPClient *http.Client
	// Identify returns who is calling (required). It returns false to let
	// the request through without limiting (health checks, say).
	Identify func(r *http.Request) (Identity, bool)
	// Cost returns the tokens a request takes (default: 1). 0 checks
	// without taking (a peek); a negative result counts as 1 and a result
	// above api.MaxCost as api.MaxCost.
	Cost func(r *http.Request) int
	// Timeout bounds each remote check, connection included (default
	// 100ms).
	Timeout time.Duration
	// FailOpen is remote mode's answer when the limiter cannot be reached
	// (transport error, timeout, a status other than 200, 400, 403, 429
	// and 503, or a 403/429/503 without the error envelope): true lets the
	// request through with X-RateLimit-Degraded: 1; false (the zero
	// value) answers 503 LIMITER_UNAVAILABLE with Retry-After: 1. A 400
	// is the caller's bad input, not unavailability: it is answered 400
	// (the limiter's envelope), never let through. A request whose
	// Identity names an Account (a login or token request) fails closed
	// whatever FailOpen says, as the contract's auth class does
	// (failure_mode: {auth: closed}), unless FailOpenAccounts is set: an
	// attacker who gets the limiter down or slower than Timeout must not
	// get unlimited password guesses.
	FailOpen bool
	// FailOpenAccounts lets requests that name an account through too when
	// FailOpen is set and the limiter cannot be reached (default false:
	// they are answered 503 LIMITER_UNAVAILABLE).
	FailOpenAccounts bool
	// DeviceTokens verifies Identity.DeviceToken in direct mode (the
	// limiters' key: attestation.TokensFromPolicy); nil treats every
	// device as unverified. Remote mode sends the token to the limiter.
	DeviceTokens *attestation.Tokens
	// Logger receives failures (default: discarded). Failures of the
	// remote limiter are logged at most once a second, with a count of the
	// ones suppressed.
	Logger *slog.Logger
	// Now is the clock (default time.Now): it dates direct mode's device
	// token checks and spaces the failure log lines. Tests inject one.
	Now func() time.Time
}

// limiter is a configured middleware.
type limiter struct {
	eng      *engine.Engine
	tokens   *attestation.Tokens
	checkURL string
	auth     []string // the Authorization header of remote checks, or nil
	client   *http.Client
	identify func(r *http.Request) (Identity, bool)
	cost     func(r *http.Request) int
	timeout  time.Duration
	failOpen bool
	// failOpenAccounts: Options.FailOpenAccounts
	failOpenAccounts bool
	log              *slog.Logger
	now              func() time.Time
	throttle         logthrottle.Throttle
}

// New returns the middleware o describes. The middleware is safe for
// concurrent use.
func New(o Options) (func(http.Handler) http.Handler, error) {
	if o.Identify == nil {
		return nil, ErrNoIdentify
	}
	if (o.Engine == nil) == (o.LimiterURL == "") {
		return nil, ErrMode
	}
	l := &limiter{eng: o.Engine, tokens: o.DeviceTokens, identify: o.Identify, cost: o.Cost, timeout: o.Timeout, failOpen: o.FailOpen, failOpenAccounts: o.FailOpenAccounts, client: o.HTTPClient, now: o.Now}
	if l.timeout <= 0 {
		l.timeout = DefaultTimeout
	}
	if l.now == nil {
		l.now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	l.log = o.Logger.With("component", "middleware")
	if o.LimiterURL != "" {
		u, err := url.Parse(o.LimiterURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%w: %q", ErrLimiterURL, o.LimiterURL)
		}
		l.checkURL = strings.TrimRight(o.LimiterURL, "/") + "/v1/check"
		if o.APIToken != "" {
			l.auth = []string{"Bearer " + o.APIToken}
		}
		if l.client == nil {
			l.client = defaultClient()
		}
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.serve(w, r, next) })
	}, nil
}

// defaultClient is the remote mode's own client: pooled keep-alive
// connections to the limiter, no redirects.
func defaultClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 256
	tr.MaxIdleConnsPerHost = 256
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// serve limits one request, then calls next when it may proceed.
func (l *limiter) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	id, ok := l.identify(r)
	if !ok {
		next.ServeHTTP(w, r)
		return
	}
	rid := api.RequestID(w, r)
	ep := fullEndpoint(r)
	if len(ep) > api.MaxEndpointLen {
		// a cut path may match another route than the handler serves
		// (GET /files/*.zip without its .zip): never check what is left
		api.WriteError(w, rid, http.StatusBadRequest, api.CodeBadRequest,
			fmt.Sprintf("the request path is longer than %d bytes", api.MaxEndpointLen-len(r.Method)-1), "")
		return
	}
	in := engine.Input{Endpoint: ep, Cost: float64(l.costOf(r))}
	if msg := normalize(&id, &in); msg != "" {
		l.log.LogAttrs(r.Context(), slog.LevelWarn, "identity refused", slog.String("request_id", rid), slog.String("reason", msg))
		api.WriteError(w, rid, http.StatusBadRequest, api.CodeBadRequest, msg, "")
		return
	}
	if l.eng != nil {
		l.direct(w, r, next, rid, &in)
		return
	}
	l.remote(w, r, next, rid, &in)
}

// costOf is the request's cost, clamped to [0, api.MaxCost].
func (l *limiter) costOf(r *http.Request) int {
	if l.cost == nil {
		return 1
	}
	c := l.cost(r)
	switch {
	case c < 0:
		return 1
	case c > api.MaxCost:
		return api.MaxCost
	}
	return c
}

// normalize validates id as the check API would and copies it into in;
// it returns "" or what is wrong.
func normalize(id *Identity, in *engine.Input) string {
	if id.IP == "" {
		return "identity: the client IP is missing"
	}
	ip, err := netip.ParseAddr(id.IP)
	if err != nil {
		return fmt.Sprintf("identity: the client IP %q is not an IP address", clip(id.IP))
	}
	in.IP = ip.WithZone("").Unmap().String()
	for _, f := range []struct {
		name string
		v    string
		dst  *string
	}{{"user id", id.UserID, &in.UserID}, {"device id", id.DeviceID, &in.DeviceID}} {
		if msg := api.CheckID(f.v); msg != "" {
			return "identity: the " + f.name + " " + msg
		}
		*f.dst = f.v
	}
	// the account is judged once normalised, as the check API judges it:
	// lower-casing can grow it past the bound (U+023A is 2 bytes, its
	// lower case 3), trimming shrink it under (padded "frank" is frank)
	acct, msg := api.CheckAccount(id.Account)
	if msg != "" {
		return "identity: the account " + msg
	}
	in.Account = acct
	if len(id.DeviceToken) <= api.MaxIDLen && api.CheckID(id.DeviceToken) == "" {
		in.DeviceToken = id.DeviceToken // a bad token is no error: the device is unverified
	}
	if len(id.Attributes) > policy.MaxAttributes {
		return fmt.Sprintf("identity: %d attributes, at most %d", len(id.Attributes), policy.MaxAttributes)
	}
	for _, name := range sortedNames(id.Attributes) {
		if msg := policy.CheckAttribute(name, id.Attributes[name]); msg != "" {
			return fmt.Sprintf("identity: attribute %q %s", clip(name), msg)
		}
	}
	if len(id.Attributes) > 0 {
		in.Attributes = id.Attributes
	}
	return ""
}

// sortedNames returns the keys of m in order.
func sortedNames(m map[string]string) []string {
	if len(m) == 0 {
		return nil
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// clip shortens s for a message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// Endpoint returns the endpoint checked for r: its method, a space and its
// path, made acceptable to the check API (see the package comment). The
// middleware itself checks no cut endpoint: a request whose endpoint is
// longer than api.MaxEndpointLen is refused (400), as in proxy mode.
func Endpoint(r *http.Request) string {
	ep := fullEndpoint(r)
	if len(ep) > api.MaxEndpointLen {
		ep = ep[:api.MaxEndpointLen]
		for !utf8.ValidString(ep) {
			ep = ep[:len(ep)-1]
		}
	}
	return ep
}

// fullEndpoint is Endpoint before the cut.
func fullEndpoint(r *http.Request) string {
	path := r.URL.Path
	if !cleanPath(path) {
		path = r.URL.EscapedPath()
	}
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	return r.Method + " " + path
}

// cleanPath reports whether p has no space or control character and is
// valid UTF-8.
func cleanPath(p string) bool {
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return utf8.ValidString(p)
}

// direct decides in process.
func (l *limiter) direct(w http.ResponseWriter, r *http.Request, next http.Handler, rid string, in *engine.Input) {
	in.DeviceVerified = in.DeviceID != "" && l.tokens.Verify(in.DeviceToken, in.DeviceID, l.now())
	d := engine.GetDecision()
	if err := l.eng.Decide(r.Context(), in, d); err != nil {
		engine.PutDecision(d)
		l.log.LogAttrs(r.Context(), slog.LevelError, "decide", slog.String("request_id", rid),
			slog.String("endpoint", in.Endpoint), slog.String("err", err.Error()))
		api.WriteError(w, rid, http.StatusInternalServerError, api.CodeInternal, "internal error", "")
		return
	}
	pass := api.WriteDecision(w, rid, d)
	lease := d.LeaseID()
	engine.PutDecision(d)
	if pass {
		if lease != "" {
			// the slots of concurrency limits are held until next returns,
			// or a connection it hijacked is closed
			serveHolding(w, r, next, func() { l.releaseDirect(rid, lease) })
			return
		}
		next.ServeHTTP(w, r)
	}
}

// Headers copied from the limiter's answer: passHeaders on every answer,
// denyHeaders too on a relayed denial.
var (
	passHeaders = api.LimitHeaders
	denyHeaders = []string{"Retry-After", "X-Request-Id", "Content-Type"}
)

// maxAnswer bounds the limiter's answer read (its bodies are far smaller).
const maxAnswer = 64 << 10

// bufPool holds check request bodies.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// remote asks the limiter and relays its answer.
func (l *limiter) remote(w http.ResponseWriter, r *http.Request, next http.Handler, rid string, in *engine.Input) {
	bp := bufPool.Get().(*[]byte)
	body := appendCheck((*bp)[:0], in)
	status, header, answer, err := l.call(r.Context(), rid, body)
	*bp = body[:0]
	bufPool.Put(bp)
	if err != nil {
		if r.Context().Err() != nil {
			return // the caller is gone: nobody to answer
		}
		l.unavailable(w, r, next, rid, in.Account != "", err)
		return
	}
	switch status {
	case http.StatusOK:
		copyHeaders(w.Header(), header, passHeaders)
		if lease := leaseOf(answer); lease != "" {
			serveHolding(w, r, next, func() { l.releaseRemote(rid, lease) })
			return
		}
		next.ServeHTTP(w, r)
	case http.StatusBadRequest:
		// The limiter refused what the caller sent (an identity the
		// middleware let through): the caller's bad input, never the
		// limiter's unavailability, which FailOpen would let pass
		// unlimited.
		l.badRequest(w, r, rid, header, answer)
	case http.StatusTooManyRequests, http.StatusForbidden, http.StatusServiceUnavailable:
		if !isEnvelope(answer) {
			l.unavailable(w, r, next, rid, in.Account != "", fmt.Errorf("middleware: limiter answered %d without an error envelope", status))
			return
		}
		h := w.Header()
		copyHeaders(h, header, passHeaders)
		copyHeaders(h, header, denyHeaders)
		h["Content-Length"] = []string{strconv.Itoa(len(answer))}
		w.WriteHeader(status)
		_, _ = w.Write(answer)
	default:
		l.unavailable(w, r, next, rid, in.Account != "", fmt.Errorf("middleware: limiter answered %d: %s", status, clip(string(answer))))
	}
}

// call POSTs body to the limiter within the timeout and reads the answer.
func (l *limiter) call(parent context.Context, rid string, body []byte) (int, http.Header, []byte, error) {
	ctx, cancel := context.WithTimeout(parent, l.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.checkURL, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("middleware: check request: %w", err)
	}
	req.Header["Content-Type"] = []string{"application/json"}
	req.Header["X-Request-Id"] = []string{rid}
	if l.auth != nil {
		req.Header["Authorization"] = l.auth
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("middleware: check: %w", err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("middleware: read the limiter's %d answer: %w", resp.StatusCode, err)
	}
	return resp.StatusCode, resp.Header, answer, nil
}

// appendCheck appends the /v1/check body for in.
func appendCheck(b []byte, in *engine.Input) []byte {
	b = append(b, `{"endpoint":`...)
	b = api.AppendJSONString(b, in.Endpoint)
	b = append(b, `,"ip":`...)
	b = api.AppendJSONString(b, in.IP)
	if in.UserID != "" {
		b = append(b, `,"user_id":`...)
		b = api.AppendJSONString(b, in.UserID)
	}
	if in.DeviceID != "" {
		b = append(b, `,"device_id":`...)
		b = api.AppendJSONString(b, in.DeviceID)
	}
	if in.Account != "" {
		b = append(b, `,"account":`...)
		b = api.AppendJSONString(b, in.Account)
	}
	if in.DeviceToken != "" {
		b = append(b, `,"device_token":`...)
		b = api.AppendJSONString(b, in.DeviceToken)
	}
	if len(in.Attributes) > 0 {
		b = append(b, `,"attributes":{`...)
		for i, name := range sortedNames(in.Attributes) {
			if i > 0 {
				b = append(b, ',')
			}
			b = api.AppendJSONString(b, name)
			b = append(b, ':')
			b = api.AppendJSONString(b, in.Attributes[name])
		}
		b = append(b, '}')
	}
	b = append(b, `,"cost":`...)
	b = strconv.AppendInt(b, int64(in.Cost), 10)
	return append(b, '}')
}

// isEnvelope reports whether b is the limiter's error envelope.
func isEnvelope(b []byte) bool {
	var env struct {
		Error *struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	return json.Unmarshal(b, &env) == nil && env.Error != nil && env.Error.Code != ""
}

// copyHeaders copies the named (canonical) headers from src to dst.
func copyHeaders(dst, src http.Header, names []string) {
	for _, k := range names {
		if v := src.Values(k); len(v) > 0 {
			dst[k] = v // the name as given: api's spelling, not net/http's canonical one
		}
	}
}

// badRequest answers the limiter's 400: its envelope verbatim, or the
// middleware's own 400 BAD_REQUEST when it sent none (a proxy between
// them answered). The app is not called, whatever FailOpen says.
func (l *limiter) badRequest(w http.ResponseWriter, r *http.Request, rid string, header http.Header, answer []byte) {
	if n, ok := l.throttle.Allow(l.now()); ok {
		l.log.LogAttrs(r.Context(), slog.LevelWarn, "limiter refused the check: 400", slog.String("request_id", rid),
			slog.String("answer", clip(string(answer))), slog.Int64("suppressed", n))
	}
	if !isEnvelope(answer) {
		api.WriteError(w, rid, http.StatusBadRequest, api.CodeBadRequest, "the rate limiter refused this request's identity", "")
		return
	}
	h := w.Header()
	copyHeaders(h, header, denyHeaders)
	h["Content-Length"] = []string{strconv.Itoa(len(answer))}
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(answer)
}

// unavailable applies FailOpen when the limiter could not answer; a
// request naming an account fails open only with FailOpenAccounts.
func (l *limiter) unavailable(w http.ResponseWriter, r *http.Request, next http.Handler, rid string, account bool, err error) {
	open := l.failOpen && (!account || l.failOpenAccounts)
	if n, ok := l.throttle.Allow(l.now()); ok {
		l.log.LogAttrs(r.Context(), slog.LevelWarn, "limiter unavailable", slog.String("request_id", rid),
			slog.Bool("fail_open", open), slog.String("err", err.Error()), slog.Int64("suppressed", n))
	}
	if open {
		w.Header()[api.HeaderDegraded] = []string{"1"}
		next.ServeHTTP(w, r)
		return
	}
	w.Header()["Retry-After"] = []string{strconv.Itoa(int(unavailableRetry / time.Second))}
	api.WriteError(w, rid, http.StatusServiceUnavailable, api.CodeLimiterUnavailable, "Rate limiter unavailable",
		string(jsonw.AppendInt(jsonw.AppendMember(nil, "retry_after_ms"), unavailableRetry.Milliseconds())))
}
