package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"

	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/internal/usersig"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// ProxyOptions configures reverse-proxy mode.
type ProxyOptions struct {
	// Upstream is the API requests are forwarded to (required).
	Upstream *url.URL
	// Transport reaches the upstream (default: NewUpstreamTransport).
	Transport http.RoundTripper
	// UpstreamTimeout bounds the wait for the upstream's answer (its
	// status and headers): past it the client gets 504 UPSTREAM_TIMEOUT
	// (default DefaultUpstreamTimeout).
	UpstreamTimeout time.Duration
	// IdleTimeout bounds how long a proxied response may go without a
	// byte moving, from the upstream or to the client; a response that
	// keeps moving streams for as long as it lasts (default
	// DefaultProxyIdleTimeout).
	IdleTimeout time.Duration
	// Getenv reads the user signature key (default os.Getenv).
	Getenv func(string) string
	// OnForgedUser is called when a user header fails its signature.
	OnForgedUser func()
	// OnUpstreamError is called when the upstream cannot be reached or
	// does not answer in time (not when the client gave up first).
	OnUpstreamError func()
}

// proxy is the reverse-proxy handler: identity -> check -> forward.
type proxy struct {
	s  *Server
	o  ProxyOptions
	rp *httputil.ReverseProxy
	// noKey warns once that a signed user header met an empty key
	// variable (outside proxy mode the start is not refused for it).
	noKey sync.Once
}

// EnableProxy turns on reverse-proxy mode: the handler Public returns
// checks every request but its health and attestation endpoints with the
// identity the policy's `identity` section describes and, when allowed,
// forwards it to the upstream with the rate-limit headers on its response.
func (s *Server) EnableProxy(o ProxyOptions) error {
	if o.Upstream == nil || o.Upstream.Host == "" {
		return errors.New("api: proxy upstream is required")
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Transport == nil {
		o.Transport = NewUpstreamTransport()
	}
	if o.UpstreamTimeout <= 0 {
		o.UpstreamTimeout = DefaultUpstreamTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultProxyIdleTimeout
	}
	p := &proxy{s: s, o: o}
	p.rp = &httputil.ReverseProxy{
		Rewrite:   p.rewrite,
		Transport: o.Transport,
		// 0: responses of unknown length (chunked, server-sent events) are
		// flushed as they come; others are written in as few writes as possible.
		FlushInterval:  0,
		ErrorHandler:   p.upstreamFailed,
		ModifyResponse: p.modifyResponse,
	}
	s.proxy = p
	s.fwd = p // forward auth reads identities with the proxy's options
	return nil
}

// rewrite points the outgoing request at the upstream, keeping the
// client's Host, and sets the X-Forwarded headers: X-Forwarded-For is
// the client address decided on, the trusted hops after it and the peer
// (the peer alone when it is not trusted), never the entries a client
// could have written left of its own.
func (p *proxy) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(p.o.Upstream)
	pr.Out.Host = pr.In.Host
	if id, ok := pr.In.Context().Value(identityKey{}).(*identity); ok {
		setClientAddr(pr.Out.Header, id.in.IP)
		if id.xff != "" {
			pr.Out.Header.Set("X-Forwarded-For", id.xff+", "+peerHost(pr.In.RemoteAddr))
		} else {
			pr.Out.Header.Set("X-Forwarded-For", peerHost(pr.In.RemoteAddr))
		}
	}
	pr.Out.Header.Set("X-Forwarded-Proto", scheme(pr.In))
	pr.Out.Header.Set("X-Forwarded-Host", pr.In.Host)
}

// addrHeaders are the headers besides X-Forwarded-For in which an
// upstream may read the client's address: NGINX's X-Real-IP (read by
// Echo, Gin and chi, whose RealIP takes True-Client-IP first), and the
// CDNs' (Akamai, Cloudflare, Fastly). A client can write any of them.
var addrHeaders = [...]string{"X-Real-Ip", "True-Client-Ip", "X-Client-Ip", "Client-Ip", "X-Cluster-Client-Ip",
	"Cf-Connecting-Ip", "Fastly-Client-Ip"}

// xfHeaders are the X-Forwarded headers rewrite sets; ReverseProxy drops
// their canonical spellings only.
var xfHeaders = [...]string{"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host"}

// setClientAddr rewrites the outgoing header h so that no address the
// client wrote reaches the upstream as its own: each addrHeaders header
// present, in any spelling an upstream merges (sameHeaderName), is sent
// once, as addr, the client address decided on; the other spellings of
// xfHeaders (X_Forwarded_For: CGI, WSGI and Rack read it as
// X-Forwarded-For) are dropped.
func setClientAddr(h http.Header, addr string) {
	var present uint16
	for k := range h {
		for i, name := range addrHeaders {
			if sameHeaderName(k, name) {
				delete(h, k)
				present |= 1 << i
			}
		}
		for _, name := range xfHeaders {
			if sameHeaderName(k, name) {
				delete(h, k) // set again by rewrite, in the canonical spelling
			}
		}
	}
	for i, name := range addrHeaders {
		if present&(1<<i) != 0 {
			h[name] = []string{addr}
		}
	}
}

// upstreamFailed answers a request the upstream did not: a 4xx when the
// client's own body failed (bad chunks, or it did not arrive in time),
// nothing when the client gave up (its request's context was cancelled:
// not the upstream's failure, so neither counted nor warned of), else the
// upstream's 502 or 504.
func (p *proxy) upstreamFailed(w http.ResponseWriter, r *http.Request, err error) {
	if id, ok := r.Context().Value(identityKey{}).(*identity); ok && id.body != nil && id.body.failed() != nil {
		p.s.writeBodyError(w, w.Header().Get("X-Request-Id"), id.body.failed())
		return
	}
	if clientGone(r) {
		if p.s.o.Logger.Enabled(r.Context(), slog.LevelDebug) {
			p.s.o.Logger.LogAttrs(r.Context(), slog.LevelDebug, "proxy: the client went away before the upstream answered",
				slog.String("request_id", w.Header().Get("X-Request-Id")), slog.Any("err", err))
		}
		return
	}
	if p.o.OnUpstreamError != nil {
		p.o.OnUpstreamError()
	}
	rid := w.Header().Get("X-Request-Id")
	aerr := upstreamError(r, err)
	p.s.o.Logger.Warn("proxy: upstream", "request_id", rid, "status", aerr.status, "err", err)
	writeError(w, rid, aerr)
}

// modifyResponse starts the request's idle deadline on the upstream's
// answer (see watchdog.started), drops the upstream's headers the
// limiter's replace, and records the upstream's outcome.
func (p *proxy) modifyResponse(resp *http.Response) error {
	if id, ok := resp.Request.Context().Value(identityKey{}).(*identity); ok {
		if id.wd != nil {
			id.wd.started(resp)
		}
		dropOwnHeaders(resp.Header, id.own)
		if id.acctHeader != "" {
			id.confirmed = confirmedAccount(resp.Header, id.acctHeader)
		}
	}
	return p.outcome(resp)
}

// confirmedAccount returns the account the upstream names in its answer's
// header name (identity.account_response_header), normalised, and removes
// the header, which is the limiter's to read, not the client's: "" when
// the header is absent, given more than once or not a valid account.
func confirmedAccount(h http.Header, name string) string {
	vs := h.Values(name)
	h.Del(name)
	if len(vs) != 1 {
		return ""
	}
	if acct := policy.NormalizeAccount(vs[0]); acct != "" && CheckID(acct) == "" {
		return acct
	}
	return ""
}

// ownHeaders are the headers the limiter may set on a forwarded response:
// where it set one, the upstream's of the same name (in any case) is
// dropped, so the client sees each once, the limiter's. ReverseProxy adds
// the upstream's headers to the limiter's, and the limiter writes some
// names in a spelling (X-RateLimit-Limit) that is not net/http's
// canonical one (X-Ratelimit-Limit), so both would otherwise go out.
var ownHeaders = [...]string{HeaderLimit, HeaderRemaining, HeaderReset, HeaderDegraded, HeaderRateLimit, HeaderPolicy,
	"Retry-After", "X-Request-Id"}

// ownSet returns the set (a bit per ownHeaders entry) of ownHeaders that
// h holds.
func ownSet(h http.Header) uint16 {
	var set uint16
	for i, name := range ownHeaders {
		if _, ok := h[name]; ok {
			set |= 1 << i
		}
	}
	return set
}

// dropOwnHeaders deletes from the upstream's header h every header of
// set, in any spelling.
func dropOwnHeaders(h http.Header, set uint16) {
	if set == 0 {
		return
	}
	for k := range h {
		for i, name := range ownHeaders {
			if set&(1<<i) != 0 && strings.EqualFold(k, name) {
				delete(h, k)
				break
			}
		}
	}
}

func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// identity is who a proxied request is, as the policy's identity section says.
type identity struct {
	in       engine.Input
	class    string
	xff      string // the client's entry and the trusted hops of the incoming X-Forwarded-For
	rid      string
	verified bool
	body     *clientBody // the request's body as it arrives (nil: none)
	whole    []byte      // the body decompressed, when it was read whole before deciding (an account's)
	wd       *watchdog   // the forwarded request's deadlines
	own      uint16      // the ownHeaders the limiter set on the response (ownSet)
	// acctHeader is identity.account_response_header when the request was
	// decided ("": none); confirmed the account the upstream's answer named
	// in it (normalised; "" when none or not one valid value)
	acctHeader, confirmed string
	// tokenExp is the expiry of the device token that proved the device
	// (zero when none did): its reports carry it (Report.TokenExpires)
	tokenExp time.Time
}

type identityKey struct{}

// ServeHTTP checks and forwards one request (its path already normalised).
func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rid := requestID(w, r)
	pol := p.s.o.Engine.Policy()
	id := &identity{rid: rid, acctHeader: pol.Identity.AccountResponseHeader}
	if hasBody(r) {
		id.body = &clientBody{rc: r.Body}
		r.Body = id.body
	}
	aerr := p.identify(r, pol, id)
	if aerr == nil {
		aerr = p.watchOverride(r, pol, id)
	}
	if aerr != nil {
		if aerr.status == http.StatusRequestTimeout {
			// the server's write deadline may be as old as the body's
			_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(5 * time.Second))
			w.Header().Set("Connection", "close")
		}
		writeError(w, rid, aerr)
		return
	}
	d := engine.GetDecision()
	defer engine.PutDecision(d)
	if err := p.s.o.Engine.Decide(r.Context(), &id.in, d); err != nil {
		p.s.o.Logger.Error("proxy: decide", "request_id", rid, "err", err)
		writeError(w, rid, &apiError{status: http.StatusInternalServerError, code: CodeInternal, message: "internal error"})
		return
	}
	id.class = d.Class
	allowed := WriteDecision(w, rid, d)
	if p.s.o.Events != nil {
		p.s.publish(rid, &id.in, d)
	}
	if !allowed {
		return
	}
	// the slots of concurrency limits are held until the response has
	// been sent, or the client went away (ServeHTTP returns then too)
	defer p.s.releaseAfter(rid, d)
	id.own = ownSet(w.Header())
	r = r.WithContext(context.WithValue(r.Context(), identityKey{}, id))
	r.Header.Set("X-Request-Id", rid)
	p.forward(w, r, id)
}

// identify fills id from the request per the identity section: client IP,
// verified user, device, and the account on auth routes. An identity
// header given more than once is refused (6.4), and the forwarded request
// carries the user header only as the verified value.
func (p *proxy) identify(r *http.Request, pol *policy.Policy, id *identity) *apiError {
	ident := &pol.Identity
	for _, name := range identityHeaders(ident) {
		if _, n := headerValue(r.Header, name); n > 1 {
			return badRequest(fmt.Sprintf("header %q is given more than once (in some spelling); send it once", name))
		}
	}
	ip, xff := clientIP(r, ident.TrustedProxies)
	if !ip.IsValid() {
		return badRequest("cannot determine the client address")
	}
	id.xff = xff
	path := policy.RoutePath(r.URL.EscapedPath())
	ep := r.Method + " " + path
	if aerr := checkProxyEndpoint(ep); aerr != nil {
		return aerr
	}
	id.in = engine.Input{Endpoint: ep, IP: ip.Unmap().String(), Addr: ip.Unmap(), Cost: 1}
	if aerr := checkOverride(pol, r, r.Method, path); aerr != nil {
		return aerr
	}
	if ident.UserHeader != "" {
		user, _ := headerValue(r.Header, ident.UserHeader)
		deleteHeader(r.Header, ident.UserHeader) // set again below when verified
		if user != "" && CheckID(user) == "" {
			sig, _ := headerValue(r.Header, ident.UserSignatureHeader)
			if p.userVerified(ident, user, sig) {
				id.in.UserID = user
				id.verified = true
				r.Header.Set(ident.UserHeader, user)
			} else if p.o.OnForgedUser != nil {
				// An unverified user header is removed before forwarding
				// and the request is unauthenticated.
				p.o.OnForgedUser()
			}
		}
	}
	if ident.DeviceHeader != "" {
		if dev, _ := headerValue(r.Header, ident.DeviceHeader); dev != "" && CheckID(dev) == "" {
			id.in.DeviceID = dev
		}
	}
	if id.in.DeviceID != "" {
		tok, _ := headerValue(r.Header, deviceTokenHeader(ident))
		id.tokenExp, id.in.DeviceVerified = p.s.deviceToken(tok, id.in.DeviceID)
	}
	if aerr := attributesFromHeaders(r.Header, ident, &id.in); aerr != nil {
		return aerr
	}
	if ident.AccountBodyField == "" && ident.AccountHeader == "" {
		return nil // no account to find: skip matching the route twice
	}
	if ci, _ := pol.Route(r.Method, path); pol.ReadsAccount(ci) {
		return p.account(r, ident, id)
	}
	return nil
}

// watchOverride checks a POST's form body for a _method field routed
// otherwise than POST (7.1), when some method an override names routes
// its path otherwise: at once when the body was read whole, else as it
// is forwarded (the request is cut short and answered 400 when a field
// is refused), so a body of any size streams.
func (p *proxy) watchOverride(r *http.Request, pol *policy.Policy, id *identity) *apiError {
	path := id.in.Endpoint[len(r.Method)+1:]
	if !bodyOverrides(pol, r, path) {
		return nil
	}
	ct := r.Header.Get("Content-Type")
	if id.whole != nil {
		return bodyOverride(pol, path, id.whole, ct)
	}
	if len(contentCodings(r.Header.Values("Content-Encoding"))) > 0 {
		// the scanner reads bodies as sent: a compressed form is not
		// scanned, and an upstream that decompresses could override
		return &apiError{status: http.StatusUnsupportedMediaType, code: CodeUnsupportedMedia,
			message: "header Content-Encoding: a compressed form body is not read for its _method field on a path that methods route apart; send it uncompressed"}
	}
	if id.body != nil && r.Body == io.ReadCloser(id.body) {
		id.body.scan = newBodyScanner(pol, path, ct)
	}
	return nil
}

// checkProxyEndpoint refuses a request whose endpoint (method, a space
// and the normalised path) is longer than MaxEndpointLen, as the check
// API refuses such an endpoint: 400 naming the path. Deciding it would
// publish a decision event as large as the path (up to the header limit),
// and one such event can make the publisher drop a whole batch.
func checkProxyEndpoint(ep string) *apiError {
	if len(ep) <= MaxEndpointLen {
		return nil
	}
	_, path, _ := strings.Cut(ep, " ")
	return badRequest(fmt.Sprintf("the request path %q is too long: the endpoint (method, space, path) is %d bytes, at most %d",
		clip(path), len(ep), MaxEndpointLen))
}

// account finds the account of an auth request: the body field, read as
// the upstream reads it, else the account header; normalised (6.4).
func (p *proxy) account(r *http.Request, ident *policy.Identity, id *identity) *apiError {
	if ident.AccountBodyField != "" {
		var body []byte
		if hasBody(r) {
			var aerr *apiError
			if body, aerr = readBody(r, nil); aerr != nil {
				return aerr
			}
			r.Body = io.NopCloser(bytes.NewReader(body)) // forwarded intact
			r.ContentLength = int64(len(body))
			r.TransferEncoding = nil
		}
		plain, aerr := decodedBody(body, r.Header.Values("Content-Encoding"))
		if aerr != nil {
			return aerr
		}
		if body != nil {
			id.whole = plain
		}
		acct, aerr := accountFromBody(plain, r.Header.Get("Content-Type"), r.URL.RawQuery, ident.AccountFields())
		if aerr != nil {
			return aerr
		}
		id.in.Account = accountID(acct)
	}
	if id.in.Account == "" && ident.AccountHeader != "" {
		acct, _ := headerValue(r.Header, ident.AccountHeader)
		id.in.Account = accountID(acct)
	}
	return nil
}

// userVerified checks the user header's signature when a key is
// configured (2.x, 7.1): the bare or the timestamped form, by any key of
// identity.user_signature_key_env, judged by the limiter's clock.
func (p *proxy) userVerified(ident *policy.Identity, user, sig string) bool {
	if ident.UserSignatureKeyEnv == "" {
		return true
	}
	names := ident.UserSignatureKeyEnvs
	if len(names) == 0 { // a policy built by hand
		names = []string{ident.UserSignatureKeyEnv}
	}
	keys := make([][]byte, 0, len(names))
	for _, name := range names {
		if k := p.o.Getenv(name); k != "" {
			keys = append(keys, []byte(k))
		}
	}
	if len(keys) == 0 {
		p.noKey.Do(func() {
			p.s.o.Logger.Warn("a user header arrived but every environment variable of identity.user_signature_key_env ("+
				strings.Join(names, ", ")+") is empty: no user header can be verified, so every request is judged unauthenticated; set one",
				"variables", names)
		})
		return false
	}
	return usersig.Verify(keys, user, sig, p.s.o.Now(), usersig.Options{
		MaxAge: ident.UserSignatureMaxAge, RequireTimestamp: ident.UserSignatureRequireTimestamp})
}

// clientIP returns the client address: the peer, or, when the peer is a
// trusted proxy, the right-most X-Forwarded-For address that is not a
// trusted proxy. It also returns the chain to forward: the client's entry
// followed by the trusted hops after it, "" when the peer is not trusted
// or is itself the client; the entries left of the client's, which the
// client may have written, are dropped.
func clientIP(r *http.Request, trusted []netip.Prefix) (netip.Addr, string) {
	peer, err := netip.ParseAddr(peerHost(r.RemoteAddr))
	if err != nil {
		return netip.Addr{}, ""
	}
	peer = peer.WithZone("").Unmap()
	if !inPrefixes(peer, trusted) {
		return peer, "" // never trust X-Forwarded-For from an untrusted peer
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				hops = append(hops, h)
			}
		}
	}
	client, from := peer, len(hops)
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := hopAddr(hops[i])
		if !ok {
			break // garbage: stop at the last good hop
		}
		client, from = a, i
		if !inPrefixes(client, trusted) {
			break
		}
	}
	if from == len(hops) {
		return client, "" // the peer is the client
	}
	// what lies left of the client's entry is whatever the client wrote;
	// its own entry is forwarded as the address decided on (no port)
	hops[from] = client.String()
	return client, strings.Join(hops[from:], ", ")
}

func inPrefixes(a netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// outcome reports login outcomes seen on auth routes: 401/403 ->
// login_failed, 2xx -> login_succeeded. Publishing happens off the
// response path.
func (p *proxy) outcome(resp *http.Response) error {
	id, ok := resp.Request.Context().Value(identityKey{}).(*identity)
	if !ok || id.class != "auth" || p.s.o.Reporter == nil {
		return nil
	}
	var typ string
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		typ = streams.ReportLoginFailed
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		typ = streams.ReportLoginSucceeded
	default:
		return nil
	}
	acct := id.in.Account
	if typ == streams.ReportLoginSucceeded && id.acctHeader != "" {
		// the account the upstream says logged in, not the one the body
		// named: a refresh grant ignores the body's (7.1)
		acct = id.confirmed
	}
	rep := &streams.Report{V: streams.SchemaVersion, ID: ulid.Make().String(), TS: p.s.o.Now().UTC(), Type: typ, Source: "proxy",
		Account: acct, IP: id.in.IP, DeviceID: id.in.DeviceID, UserID: id.in.UserID, ASN: id.in.ASN, Attributes: id.in.Attributes}
	// a proven device, not a claimed id: velocity rules by device count
	// the two apart (7.1), only a proven login_succeeded enrols it, and
	// only a proven device matches a device allow list
	rep.Attested, rep.TokenExpires = id.in.DeviceVerified, id.tokenExp
	rep.AllowList = p.s.allowList(rep)
	if !p.s.reports.add() {
		p.s.o.Logger.Warn("proxy: report after shutdown's wait; not published", "type", typ, "request_id", id.rid)
		return nil
	}
	go func() {
		defer p.s.reports.done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.s.o.Reporter.Report(ctx, rep); err != nil {
			p.s.o.Logger.Warn("proxy: report", "type", typ, "request_id", id.rid, "err", err)
			return
		}
		p.s.countReport(rep)
	}()
	return nil
}

// WaitReports waits for reports of proxied outcomes still being
// published. Reports of requests that end after it began (requests cut
// at a drain's timeout, whose handlers can still be running) are not
// published: the reporter is closed next.
func (s *Server) WaitReports() { s.reports.wait() }

// pending counts work in flight until wait is called; after that, add
// refuses new work, so that no Add races the Wait (which sync.WaitGroup
// forbids once the count may be zero).
type pending struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// add counts one piece of work, false once wait began.
func (p *pending) add() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.wg.Add(1)
	return true
}

// done ends one piece of work.
func (p *pending) done() { p.wg.Done() }

// wait refuses new work and waits for the work in flight.
func (p *pending) wait() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
}

// Guard checks requests to an endpoint the limiter serves to apps itself
// (attestation) against the policy, keyed by the client IP as proxy mode
// finds it (X-Forwarded-For only from trusted proxies): an unauthenticated
// endpoint that writes state must not be free to flood. The endpoint is
// "METHOD /path", so routes and limits of the policy apply to it. An
// attestation (POST PathAttestApple, PathAttestAndroid) that verifies and
// binds a new device id also takes from risk.attestation.max_per_ip, by
// the same address: the attestation handler calls the budget the Guard
// hands it in the request's context (takeAttestBudget).
func (s *Server) Guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rid := requestID(w, r)
		pol := s.o.Engine.Policy()
		ip, _ := clientIP(r, pol.Identity.TrustedProxies)
		if !ip.IsValid() {
			writeError(w, rid, badRequest("cannot determine the client address"))
			return
		}
		ep := r.Method + " " + r.URL.Path
		if aerr := checkProxyEndpoint(ep); aerr != nil {
			writeError(w, rid, aerr)
			return
		}
		in := engine.Input{Endpoint: ep, IP: ip.Unmap().String(), Addr: ip.Unmap(), Cost: 1}
		if r.Method == http.MethodPost && (r.URL.Path == PathAttestApple || r.URL.Path == PathAttestAndroid) {
			r = r.WithContext(context.WithValue(r.Context(), attestBudgetKey{}, s.attestBudget(r.Context(), in)))
		}
		d := engine.GetDecision()
		defer engine.PutDecision(d)
		if err := s.o.Engine.Decide(r.Context(), &in, d); err != nil {
			s.o.Logger.Error("guard: decide", "request_id", rid, "err", err)
			writeError(w, rid, &apiError{status: http.StatusInternalServerError, code: CodeInternal, message: "internal error"})
			return
		}
		if s.o.Events != nil {
			s.publish(rid, &in, d)
		}
		if !WriteDecision(w, rid, d) {
			return
		}
		defer s.releaseAfter(rid, d)
		r.Header.Set("X-Request-Id", rid)
		h.ServeHTTP(w, r)
	})
}

// attestBudgetKey is the context key of the attestBudget the Guard hands
// the attestation handler.
type attestBudgetKey struct{}

// attestBudget takes one token of risk.attestation.max_per_ip for the
// attestation in, answering w itself and reporting false when it is
// denied (429 naming attestation-ip) or cannot be decided.
type attestBudget func(w http.ResponseWriter, rid string) bool

// attestBudget returns the budget of the attestation in (its address as
// the Guard found it): a decision of max_per_ip alone
// (engine.Input.AttestationBudget), published like any other.
func (s *Server) attestBudget(ctx context.Context, in engine.Input) attestBudget {
	in.AttestationBudget = true
	return func(w http.ResponseWriter, rid string) bool {
		d := engine.GetDecision()
		defer engine.PutDecision(d)
		if err := s.o.Engine.Decide(ctx, &in, d); err != nil {
			s.o.Logger.Error("guard: attestation budget", "request_id", rid, "err", err)
			writeError(w, rid, &apiError{status: http.StatusInternalServerError, code: CodeInternal, message: "internal error"})
			return false
		}
		if s.o.Events != nil {
			s.publish(rid, &in, d)
		}
		return WriteDecision(w, rid, d)
	}
}

// takeAttestBudget takes the attestation budget r's Guard handed it
// (true, taking nothing, when r came through none: the handler mounted
// alone bounds nothing by address).
func takeAttestBudget(w http.ResponseWriter, r *http.Request, rid string) bool {
	take, ok := r.Context().Value(attestBudgetKey{}).(attestBudget)
	return !ok || take(w, rid)
}
