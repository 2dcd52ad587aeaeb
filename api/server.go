package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/internal/health"
	"github.com/tollgate-dev/tollgate/internal/jsonw"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/signals"
)

// Options configures a Server.
type Options struct {
	// Engine decides (required).
	Engine *engine.Engine
	// AdminToken is the bearer token of /v1/admin/*; empty disables the
	// admin API (it answers 404).
	AdminToken string
	// Store is what the admin API reads and writes (required with
	// AdminToken): the engine's store behind its L1 cache (engine.L1.Wrap),
	// so a change made here is seen by this limiter at once.
	Store AdminStore
	// Getenv reads the user-signature key the policy names, for
	// /v1/forward-auth outside proxy mode (default os.Getenv; in proxy
	// mode ProxyOptions.Getenv serves both).
	Getenv func(string) string
	// APIToken, when set, is the bearer token /v1/check and /v1/report
	// (and /v1/forward-auth) require, with the admin API's throttle on
	// failed attempts (6.2); empty leaves them open.
	APIToken string
	// NoForwardAuth turns /v1/forward-auth off: it answers 404 NOT_FOUND
	// (the limiter's --no-forward-auth, which a policy with a concurrency
	// limit needs, 7.4).
	NoForwardAuth bool
	// AttestPrefix is where the public listener serves the attestation
	// endpoints in proxy mode (default "/v1/attest/"; it must start and
	// end with a slash). A request under it is served as the same path
	// under /v1/attest/.
	AttestPrefix string
	// BodyTimeout bounds the arrival of a request body on the public
	// listener, from the request's arrival (default 30s): a body still
	// missing then is answered 408 (6.6).
	BodyTimeout time.Duration
	// Logger receives request errors (default: discard).
	Logger *slog.Logger
	// Gatherer serves /metrics (default: prometheus.DefaultGatherer).
	Gatherer prometheus.Gatherer
	// Dependencies reports each dependency's state for /readyz ("up",
	// "down", "disabled"); nil reports none.
	Dependencies func(ctx context.Context) map[string]string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Events receives every decision for publishing (nil: none published).
	Events DecisionSink
	// Reporter publishes /v1/report bodies (nil: the endpoint answers 503).
	Reporter Reporter
	// Reports, when set, counts reports accepted for publishing
	// (/v1/report answered 202, and the proxy's login outcomes) by type
	// and source: tollgate_reports_total{type,source}, the type bounded by
	// policy.EventLabel.
	Reports *prometheus.CounterVec
	// Offenders lists repeat offenders for GET /v1/admin/offenders.
	Offenders func(ctx context.Context) ([]signals.Offender, error)
	// Attestation returns a device's attestation for the admin subject
	// view (nil when none; see AttestationView). The view judges whether
	// it is in force by the store's clock.
	Attestation func(ctx context.Context, deviceID string) (view any, err error)
	// ForgetAttestation drops a device's attestation, in force or held,
	// for DELETE /v1/admin/attestations/{device_id} and reports whether
	// one was kept; nil answers 404 (attestation.Devices.Forget).
	ForgetAttestation func(ctx context.Context, deviceID string) (bool, error)
	// Audit publishes every admin change (6.5); nil publishes none (the
	// change is only logged).
	Audit Auditor
	// Trail reads the audit trail and recent alerts back for GET
	// /v1/admin/audit and /v1/admin/alerts (7.3); nil answers them 503.
	Trail Trail
	// DeviceTokens returns the device-token verifier in force (6.3); nil,
	// or a nil result, verifies no token (every device is unverified).
	DeviceTokens func() *attestation.Tokens
}

// Server serves the limiter's HTTP API. Its zero value is not usable; use New.
type Server struct {
	o        Options
	mux      *http.ServeMux
	tokenSum [32]byte          // of the admin token
	apiSum   [32]byte          // of the API token
	health   *health.Readiness // "starting", "ready", "draining"
	admin    *adminGuard
	apiGuard *adminGuard // failed API token attempts
	proxy    *proxy      // reverse-proxy mode, when enabled
	fwd      *proxy      // reads forward-auth identities: proxy, or a default one
	reports  pending     // proxy reports being published
}

// New returns a Server, validating o.
func New(o Options) (*Server, error) {
	if o.Engine == nil {
		return nil, errors.New("api: engine is required")
	}
	if o.AdminToken != "" && o.Store == nil {
		return nil, errors.New("api: the admin API (an admin token) needs a store")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Gatherer == nil {
		o.Gatherer = prometheus.DefaultGatherer
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.AttestPrefix == "" {
		o.AttestPrefix = "/v1/attest/"
	}
	if !strings.HasPrefix(o.AttestPrefix, "/") || !strings.HasSuffix(o.AttestPrefix, "/") || len(o.AttestPrefix) < 2 ||
		policy.NormalizePath(o.AttestPrefix)+"/" != o.AttestPrefix {
		return nil, fmt.Errorf("api: attest prefix %q must be a clean path that starts and ends with a slash, such as /v1/attest/", o.AttestPrefix)
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = 30 * time.Second
	}
	s := &Server{o: o, mux: http.NewServeMux(), admin: newAdminGuard(o.Now), apiGuard: newAdminGuard(o.Now)}
	s.health = health.New("starting", func(ctx context.Context) health.Probe {
		if o.Dependencies == nil {
			return health.Probe{}
		}
		return health.Probe{Dependencies: o.Dependencies(ctx)}
	})
	s.tokenSum = sha256.Sum256([]byte(o.AdminToken))
	s.apiSum = sha256.Sum256([]byte(o.APIToken))
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	s.fwd = &proxy{s: s, o: ProxyOptions{Getenv: getenv}}
	s.routes()
	return s, nil
}

// SetState sets the readiness state: "starting" and "draining" answer 503
// on /readyz, "ready" 200.
func (s *Server) SetState(state string) { s.health.SetState(state) }

func (s *Server) routes() {
	s.mux.HandleFunc("POST /v1/check", s.apiOnly(s.handleCheck))
	s.mux.HandleFunc("POST /v1/report", s.apiOnly(s.handleReport))
	s.mux.HandleFunc("POST /v1/release", s.apiOnly(s.handleRelease))
	fwd := s.handleForwardAuth
	if s.o.NoForwardAuth {
		fwd = func(w http.ResponseWriter, r *http.Request) {
			writeError(w, requestID(w, r), &apiError{status: http.StatusNotFound, code: CodeNotFound, message: "forward auth is off (--no-forward-auth)"})
		}
	}
	s.mux.HandleFunc("GET /v1/forward-auth", s.apiOnly(fwd))
	s.mux.HandleFunc("POST /v1/forward-auth", s.apiOnly(fwd))
	s.mux.HandleFunc("GET /v1/admin/offenders", s.adminOnly(s.handleOffenders))
	s.mux.HandleFunc("GET /healthz", s.handleHealthz)
	s.mux.HandleFunc("GET /readyz", s.handleReadyz)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.o.Gatherer, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("PUT /v1/admin/multipliers/{subject}/{id}", s.adminOnly(s.handlePutMultiplier))
	s.mux.HandleFunc("DELETE /v1/admin/multipliers/{subject}/{id}", s.adminOnly(s.handleDeleteMultiplier))
	s.mux.HandleFunc("GET /v1/admin/subjects/{subject}/{id}", s.adminOnly(s.handleGetSubject))
	s.mux.HandleFunc("DELETE /v1/admin/lockouts/{account}", s.adminOnly(s.handleDeleteLockout))
	s.mux.HandleFunc("DELETE /v1/admin/lockouts/{subject}/{id}", s.adminOnly(s.handleDeleteSubjectLockout))
	s.mux.HandleFunc("GET /v1/admin/lockouts", s.adminOnly(s.handleListLockouts))
	s.mux.HandleFunc("GET /v1/admin/multipliers", s.adminOnly(s.handleListMultipliers))
	s.mux.HandleFunc("GET /v1/admin/audit", s.adminOnly(s.handleAudit))
	s.mux.HandleFunc("GET /v1/admin/alerts", s.adminOnly(s.handleAlerts))
	s.mux.HandleFunc("DELETE /v1/admin/attestations/{device_id}", s.adminOnly(s.handleForgetAttestation))
	s.mux.HandleFunc("DELETE /v1/admin/trusted-devices/{account}", s.adminOnly(s.handleRevokeTrust))
	s.mux.HandleFunc("DELETE /v1/admin/trusted-devices/{account}/{device_id}", s.adminOnly(s.handleRevokeTrust))
	s.mux.HandleFunc("/v1/admin/", s.adminOnly(func(w http.ResponseWriter, r *http.Request, rid string) {
		writeError(w, rid, &apiError{status: http.StatusNotFound, code: CodeNotFound, message: "no such admin endpoint: " + clip(r.URL.Path)})
	}))
	notFound := func(w http.ResponseWriter, r *http.Request) {
		writeError(w, requestID(w, r), &apiError{status: http.StatusNotFound, code: CodeNotFound, message: "no such endpoint: " + r.Method + " " + clip(r.URL.Path)})
	}
	s.mux.HandleFunc("/v1/", notFound)
	s.mux.HandleFunc("/", notFound)
}

// Handle registers an extra handler on the server's mux (for endpoints
// other packages serve, such as reports and attestation).
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// ServeHTTP implements http.Handler for the limiter's own API: check,
// report, admin, attestation, health and metrics; in proxy mode it is the
// API listener's handler, and Public the public listener's (6.1). It
// recovers from panics so no input crashes the process, and turns the
// mux's 405 into the envelope.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer s.recoverPanic(w, r)
	s.serveAPI(w, r)
}

// recoverPanic answers 500 for a handler that panicked (deferred).
func (s *Server) recoverPanic(w http.ResponseWriter, r *http.Request) {
	if v := recover(); v != nil {
		if v == http.ErrAbortHandler {
			panic(v)
		}
		s.o.Logger.Error("panic in handler", "path", r.URL.Path, "panic", v)
		writeError(w, requestID(w, r), &apiError{status: http.StatusInternalServerError, code: CodeInternal, message: "internal error"})
	}
}

// Public returns the public listener's handler in proxy mode (6.1): it
// serves /healthz, /readyz and the attestation endpoints (under
// AttestPrefix) and forwards every other request, /v1/ paths included,
// to the upstream after the check. The path is normalised first (6.4),
// and the request body must arrive within BodyTimeout (6.6). Without
// EnableProxy every other request is 404.
func (s *Server) Public() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer s.recoverPanic(w, r)
		// The body deadline counts from arrival; headers are bounded by
		// the server's ReadHeaderTimeout. Only a request with a body gets
		// one (an upgraded connection keeps none). Not every
		// ResponseWriter can.
		rc := http.NewResponseController(w)
		if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
			_ = rc.SetReadDeadline(time.Now().Add(s.o.BodyTimeout))
		}
		// The server has no WriteTimeout (a proxied response streams for
		// as long as it moves, under the proxy's idle deadline): every
		// answer gets this bound, which a forwarded request replaces.
		_ = rc.SetWriteDeadline(time.Now().Add(max(30*time.Second, s.o.BodyTimeout+30*time.Second)))
		normalizeURL(r.URL)
		p := r.URL.Path
		switch {
		case p == "/healthz" || p == "/readyz":
			s.serveAPI(w, r)
		case strings.HasPrefix(p+"/", s.o.AttestPrefix):
			rest := strings.TrimPrefix(strings.TrimPrefix(p+"/", s.o.AttestPrefix), "/")
			r.URL.Path, r.URL.RawPath = "/v1/attest/"+strings.TrimSuffix(rest, "/"), ""
			s.serveAPI(w, r)
		case s.proxy != nil:
			s.proxy.ServeHTTP(w, r)
		default:
			writeError(w, requestID(w, r), &apiError{status: http.StatusNotFound, code: CodeNotFound, message: "no such endpoint: " + r.Method + " " + clip(p)})
		}
	})
}

// normalizeURL replaces u's path by its normalised form (6.4): what
// route matching sees is what the upstream receives.
func normalizeURL(u *url.URL) {
	esc := policy.NormalizePath(u.EscapedPath())
	if p, err := url.PathUnescape(esc); err == nil {
		u.Path, u.RawPath = p, esc
		if u.EscapedPath() != esc { // esc is the default encoding of p
			u.RawPath = ""
		}
	}
}

// serveAPI routes r on the API mux.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	if esc := r.URL.EscapedPath(); strings.HasPrefix(esc, "/v1/admin/") || strings.HasPrefix(muxClean(esc), "/v1/admin/") {
		if muxClean(esc) != esc {
			// The mux would answer 307 to the cleaned path, which a client
			// follows with the same method and token: an id sent unescaped
			// ("../multipliers/ip/203.0.113.9" as an account) would turn a
			// lift into the clear of another subject's block. Refused, past
			// the admin checks, instead.
			s.adminOnly(func(w http.ResponseWriter, r *http.Request, rid string) {
				writeError(w, rid, badRequest(fmt.Sprintf("path %q has a . or .. segment or an empty one: escape the ids in it (%%2F for /, %%2E%%2E for ..); nothing was changed", clip(esc))))
			})(w, r)
			return
		}
	}
	if _, pattern := s.mux.Handler(r); pattern == "/" || pattern == "/v1/" || pattern == "/v1/admin/" {
		// no pattern matched this method: 405 in the envelope; on an
		// admin path only past the admin checks (404 when the admin API
		// is off, 401 without the token), so its methods are not revealed
		if allowed := s.allowedMethods(r); allowed != "" {
			notAllowed := func(w http.ResponseWriter, r *http.Request, rid string) {
				w.Header().Set("Allow", allowed)
				writeError(w, rid, &apiError{status: http.StatusMethodNotAllowed, code: CodeMethodNotAllowed, message: r.Method + " is not allowed here; use " + allowed})
			}
			if pattern == "/v1/admin/" {
				s.adminOnly(notAllowed)(w, r)
			} else {
				notAllowed(w, r, requestID(w, r))
			}
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// muxClean is p as http.ServeMux cleans a path before routing it (dot
// segments removed, repeated slashes merged, a trailing slash kept).
func muxClean(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// allowedMethods lists the methods that do match r's path.
func (s *Server) allowedMethods(r *http.Request) string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
		r2 := r.Clone(r.Context())
		r2.Method = m
		if _, p := s.mux.Handler(r2); p != "" && p != "/" && p != "/v1/" && p != "/v1/admin/" {
			out = append(out, m)
		}
	}
	return strings.Join(out, ", ")
}

// RequestID returns the request's id (a sane incoming X-Request-Id, else a
// new ULID) and sets the X-Request-Id response header.
func RequestID(w http.ResponseWriter, r *http.Request) string { return requestID(w, r) }

// requestID returns the request's id: a sane incoming X-Request-Id, else a
// new ULID. It sets the response header.
func requestID(w http.ResponseWriter, r *http.Request) string {
	id := r.Header.Get("X-Request-Id")
	if !saneID(id) {
		id = ulid.Make().String()
	}
	w.Header()["X-Request-Id"] = []string{id}
	return id
}

// saneID accepts 1-128 bytes of [A-Za-z0-9._:-].
func saneID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	requestID(w, r)
	health.Healthz(w, r)
}

func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	s.health.Serve(w, r, requestID(w, r))
}

// adminGuard throttles failed admin token attempts per client address
// (throttleKey): after 10 failures in a minute the address gets 429 for
// the rest of it. It tracks at most adminMaxTracked addresses; when full,
// a new one makes room (makeRoom) without unblocking a blocked address
// while an unblocked one is tracked.
type adminGuard struct {
	now func() time.Time
	mu  sync.Mutex
	by  map[string]*attempts
}

type attempts struct {
	n     int
	start time.Time
}

func newAdminGuard(now func() time.Time) *adminGuard {
	return &adminGuard{now: now, by: make(map[string]*attempts)}
}

const (
	adminMaxFailures = 10
	adminWindow      = time.Minute
	adminMaxTracked  = 10000
)

func (g *adminGuard) blocked(addr string) (time.Duration, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	a := g.by[addr]
	if a == nil {
		return 0, false
	}
	left := adminWindow - g.now().Sub(a.start)
	if left <= 0 {
		delete(g.by, addr)
		return 0, false
	}
	return left, a.n >= adminMaxFailures
}

func (g *adminGuard) fail(addr string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	a := g.by[addr]
	if a == nil || now.Sub(a.start) >= adminWindow {
		if a == nil && len(g.by) >= adminMaxTracked {
			g.makeRoom(now)
		}
		a = &attempts{start: now}
		g.by[addr] = a
	}
	a.n++
}

// makeRoom drops the expired entries and, while that leaves the table
// fuller than nine tenths, entries not blocked; only when every address
// tracked is blocked does it drop one, the block that ends first. So an
// address filling the table never unblocks another while an unblocked one
// is tracked, and the scan, O(adminMaxTracked), runs at most once per
// adminMaxTracked/10 new addresses. g.mu must be held.
func (g *adminGuard) makeRoom(now time.Time) {
	target := adminMaxTracked - adminMaxTracked/10
	oldest := ""
	for k, v := range g.by {
		switch {
		case now.Sub(v.start) >= adminWindow:
			delete(g.by, k)
		case v.n < adminMaxFailures:
			if len(g.by) > target {
				delete(g.by, k)
			}
		case oldest == "" || v.start.Before(g.by[oldest].start):
			oldest = k
		}
	}
	if len(g.by) >= adminMaxTracked && oldest != "" {
		delete(g.by, oldest)
	}
}

// adminOnly wraps an admin handler with the bearer-token check.
func (s *Server) adminOnly(h func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rid := requestID(w, r)
		if s.o.AdminToken == "" {
			writeError(w, rid, &apiError{status: http.StatusNotFound, code: CodeNotFound, message: "the admin API is disabled (no admin token configured)"})
			return
		}
		if s.authorized(w, r, rid, s.admin, &s.tokenSum, "admin") {
			h(w, r, rid)
		}
	}
}

// apiOnly wraps a handler of the limiter's API for the API backend
// (check, report, forward auth) with the API token check, when an API
// token is configured (6.2).
func (s *Server) apiOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.o.APIToken != "" && !s.authorized(w, r, "", s.apiGuard, &s.apiSum, "api") {
			return
		}
		h(w, r)
	}
}

// bearerToken returns the token of an Authorization value "Bearer
// <token>", the scheme matched case-insensitively (RFC 9110 11.1), and
// whether the value has that scheme.
func bearerToken(auth string) (string, bool) {
	const scheme = "Bearer "
	if len(auth) < len(scheme) || !strings.EqualFold(auth[:len(scheme)], scheme) {
		return "", false
	}
	return auth[len(scheme):], true
}

// authorized checks r's bearer token against sum in constant time, with
// g's throttle on failed attempts per client address; on failure it
// writes the 401 (or 429) envelope and returns false. rid is the request
// id ("": made when an answer needs one).
func (s *Server) authorized(w http.ResponseWriter, r *http.Request, rid string, g *adminGuard, sum *[32]byte, realm string) bool {
	tok, present := bearerToken(r.Header.Get("Authorization"))
	left, ok := s.checkToken(r, tok, present, g, sum)
	if ok {
		return true
	}
	if rid == "" {
		rid = requestID(w, r)
	}
	if left > 0 {
		secs := int64((left + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", itoa(secs))
		writeError(w, rid, &apiError{status: http.StatusTooManyRequests, code: CodeTooManyAttempts, message: "too many failed " + realm + " token attempts",
			details: string(jsonw.AppendInt(jsonw.AppendMember(nil, "retry_after_ms"), left.Milliseconds()))})
		return false
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="tollgate-`+realm+`"`)
	writeError(w, rid, &apiError{status: http.StatusUnauthorized, code: CodeUnauthorized, message: "missing or wrong " + realm + " token"})
	return false
}

// checkToken checks tok (present: one was given) against sum in constant
// time, with g's throttle on failed attempts per client address: it
// reports true for the right token from an address not blocked; else
// false, with how long the address stays blocked (0: the token was
// merely wrong, and counted).
func (s *Server) checkToken(r *http.Request, tok string, present bool, g *adminGuard, sum *[32]byte) (time.Duration, bool) {
	peer := s.throttleKey(r)
	if left, blocked := g.blocked(peer); blocked && !signedIn(r) {
		return left, false
	}
	got := sha256.Sum256([]byte(tok))
	if !present || subtle.ConstantTimeCompare(got[:], sum[:]) != 1 {
		g.fail(peer)
		return 0, false
	}
	return 0, true
}

// peerHost returns the host part of a RemoteAddr.
func peerHost(addr string) string {
	if i := strings.LastIndexByte(addr, ':'); i >= 0 {
		return strings.Trim(addr[:i], "[]")
	}
	return addr
}
