package api

import (
	"bytes"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/internal/jsonw"
	"github.com/tollgate-dev/tollgate/internal/render"
)

// Forward-auth headers: the original request as the gateway describes it.
const (
	headerForwardedMethod = "X-Forwarded-Method"
	headerForwardedURI    = "X-Forwarded-Uri"
	// HeaderTollgateStatus carries the real status of a denial answered
	// 403 (forward auth with ?status=403; Envoy denials).
	HeaderTollgateStatus = render.HeaderTollgateStatus
	// HeaderTollgateEnvelope carries the denial's envelope (one line of
	// JSON) on a ?status=403 forward-auth answer, for a gateway that can
	// relay a header but not the auth response's body (NGINX auth_request).
	HeaderTollgateEnvelope = "X-Tollgate-Envelope"
)

// handleForwardAuth serves GET|POST /v1/forward-auth (contract 6.10): the
// gateway (Traefik forwardAuth, Caddy forward_auth, NGINX auth_request)
// describes the original request in X-Forwarded-Method, X-Forwarded-Uri
// and X-Forwarded-For, and copies its identity headers; the identity is
// read exactly as proxy mode reads it (trusted proxies, verified user,
// device, account header on auth routes) and decided through the check
// path. The answer is 200 with the rate-limit headers, or the denial
// (429, 403, 503) or refusal (400) with its envelope and headers; with
// ?status=403 every answer but a 200 is a 403 carrying the real status in
// X-Tollgate-Status.
func (s *Server) handleForwardAuth(w http.ResponseWriter, r *http.Request) {
	rid := requestID(w, r)
	as403 := forwardAuthMode(r.URL.RawQuery)
	orig, aerr := forwardedRequest(r)
	if aerr != nil {
		refuseForwardAuth(w, rid, aerr, as403)
		return
	}
	id := &identity{rid: rid}
	if aerr := s.fwd.identify(orig, s.o.Engine.Policy(), id); aerr != nil {
		refuseForwardAuth(w, rid, aerr, as403)
		return
	}
	d := engine.GetDecision()
	defer engine.PutDecision(d)
	if err := s.Decide(r.Context(), rid, &id.in, d); err != nil {
		s.o.Logger.Error("forward-auth: decide", "request_id", rid, "err", err)
		refuseForwardAuth(w, rid, &apiError{status: http.StatusInternalServerError, code: CodeInternal, message: "internal error"}, as403)
		return
	}
	if d.LeaseID() != "" {
		// the gateway never says when the request ends: a slot taken here
		// could only expire, so it is given back and the request refused
		s.releaseAfter(rid, d)
		refuseForwardAuth(w, rid, &apiError{status: http.StatusBadRequest, code: CodeBadRequest,
			message: "limit " + strconv.Quote(concurrencyName(d)) + " applies and holds concurrency slots, which forward auth cannot release: serve this route through proxy mode or the check API",
			details: string(jsonw.AppendString(jsonw.AppendMember(nil, "limit"), concurrencyName(d)))}, as403)
		return
	}
	if as403 {
		if status, body := render.Decision(w.Header(), rid, d); status != http.StatusOK {
			h := w.Header()
			h[HeaderTollgateStatus] = []string{strconv.Itoa(status)}
			h[HeaderTollgateEnvelope] = []string{string(bytes.TrimSpace(body))}
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write(body)
			return
		}
	}
	s.respond(w, rid, d, nil)
}

// refuseForwardAuth writes e's envelope. In the 403 form (as403) it is a
// 403 with e's status in X-Tollgate-Status and the envelope also in
// X-Tollgate-Envelope, as a denial is: NGINX's auth_request turns any
// status but 2xx, 401 and 403 into a 500 of its own, so a request any
// client can make refused (a repeated identity header, 400) would reach
// the client as NGINX's 500, without its envelope.
func refuseForwardAuth(w http.ResponseWriter, rid string, e *apiError, as403 bool) {
	if !as403 {
		writeError(w, rid, e)
		return
	}
	c := &render.Capture{H: w.Header()}
	writeError(c, rid, e)
	h := w.Header()
	h[HeaderTollgateStatus] = []string{strconv.Itoa(e.status)}
	h[HeaderTollgateEnvelope] = []string{string(bytes.TrimSpace(c.Body))}
	w.WriteHeader(http.StatusForbidden)
	_, _ = w.Write(c.Body)
}

// forwardAuthMode reads the query of /v1/forward-auth: status=403 asks for
// the 403 form. Other parameters are ignored: some gateways (Caddy) pass
// the original request's query string through.
func forwardAuthMode(rawQuery string) bool {
	if rawQuery == "" {
		return false
	}
	q, _ := url.ParseQuery(rawQuery) // what parses of a broken query still counts
	for _, v := range q["status"] {
		if v == "403" {
			return true
		}
	}
	return false
}

// forwardedRequest rebuilds the original request the gateway describes:
// its method and URI from the X-Forwarded-* headers, the forward-auth
// request's headers (the gateway copies the original ones) and peer
// address. It has no body: the gateway does not send it.
func forwardedRequest(r *http.Request) (*http.Request, *apiError) {
	method, aerr := oneHeader(r.Header, headerForwardedMethod)
	if aerr != nil {
		return nil, aerr
	}
	if method == "" {
		return nil, badRequest("header " + headerForwardedMethod + " is required (the original request's method)")
	}
	for i := 0; i < len(method); i++ {
		if !isTokenChar(method[i]) {
			return nil, badRequest("header " + headerForwardedMethod + " is not an HTTP method")
		}
	}
	uri, aerr := oneHeader(r.Header, headerForwardedURI)
	if aerr != nil {
		return nil, aerr
	}
	if uri == "" {
		return nil, badRequest("header " + headerForwardedURI + " is required (the original request's path and query)")
	}
	if len(uri) > MaxEndpointLen {
		return nil, badRequest("header " + headerForwardedURI + " is longer than " + itoa(MaxEndpointLen) + " bytes")
	}
	u, err := url.ParseRequestURI(uri)
	if err != nil || u.Scheme != "" || u.Host != "" || len(u.Path) == 0 || u.Path[0] != '/' {
		return nil, badRequest("header " + headerForwardedURI + " must be an absolute path, as in the request line: " + strconv.Quote(clip(uri)))
	}
	// the path as sent: a space is %20 there (a file name), which the
	// decoded path would refuse; a control character is refused decoded
	if msg := checkEndpoint(method + " " + u.EscapedPath()); msg != "" {
		return nil, badRequest("header " + headerForwardedURI + " " + msg)
	}
	if strings.ContainsFunc(u.Path, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return nil, badRequest("header " + headerForwardedURI + " has a control character once decoded")
	}
	orig := &http.Request{Method: method, URL: u, RequestURI: uri, Header: r.Header, RemoteAddr: r.RemoteAddr,
		Host: r.Header.Get("X-Forwarded-Host"), Body: http.NoBody, Proto: r.Proto, ProtoMajor: r.ProtoMajor, ProtoMinor: r.ProtoMinor}
	return orig.WithContext(r.Context()), nil
}

// oneHeader returns the single value of header name ("" when absent); a
// repeated header is a 400.
func oneHeader(h http.Header, name string) (string, *apiError) {
	v := h.Values(name)
	switch len(v) {
	case 0:
		return "", nil
	case 1:
		return v[0], nil
	}
	return "", badRequest("header " + name + " is repeated")
}

// RenderDecision renders d as the check API answers it (render.Decision):
// for a request that may proceed (allowed, degraded) it sets the
// rate-limit headers in h and returns 200 and no body; for a denial it
// sets the denial's headers and returns its status (429, 403, 503) and
// envelope.
func RenderDecision(h http.Header, rid string, d *engine.Decision) (status int, body []byte) {
	return render.Decision(h, rid, d)
}
