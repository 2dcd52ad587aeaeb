package api

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

type signedInKey struct{}

// SignedIn returns ctx marking the admin calls made with it as a console
// session's (7.3): the session was signed in with the admin token, so its
// calls are no token guesses, and an address the failed-token throttle
// blocks (wrong tokens from the same office NAT or VPN egress) does not
// refuse them. Their token is still checked; a wrong one still counts.
// Only in-process callers can set a context: a request from the network
// never carries it.
func SignedIn(ctx context.Context) context.Context {
	return context.WithValue(ctx, signedInKey{}, true)
}

// signedIn reports whether r was made under SignedIn.
func signedIn(r *http.Request) bool {
	v, _ := r.Context().Value(signedInKey{}).(bool)
	return v
}

// CheckAdminToken checks a token given on the console's sign-in form
// (7.3) as the admin API checks a bearer token: in constant time, a wrong
// one counted in the failed-token throttle of r's client address (7.1).
// It reports true for the right token from an address not blocked; else
// false, with how long the address stays blocked (0: merely wrong). With
// no admin token configured every token is wrong.
func (s *Server) CheckAdminToken(r *http.Request, token string) (time.Duration, bool) {
	if s.o.AdminToken == "" {
		return 0, false
	}
	return s.checkToken(r, token, true, s.admin, &s.tokenSum)
}

// ForwardedTLS reports whether r came through a trusted proxy
// (identity.trusted_proxies) that says the client reached it over TLS:
// the last X-Forwarded-Proto value, the one the nearest proxy set, is
// https. The console makes its session cookie Secure then (7.3), as over
// its own TLS. From any other peer the header is not believed.
func (s *Server) ForwardedTLS(r *http.Request) bool {
	peer, err := netip.ParseAddr(peerHost(r.RemoteAddr))
	if err != nil || !inPrefixes(peer.WithZone("").Unmap(), s.o.Engine.Policy().Identity.TrustedProxies) {
		return false
	}
	vs := r.Header.Values("X-Forwarded-Proto")
	if len(vs) == 0 {
		return false
	}
	hops := strings.Split(vs[len(vs)-1], ",")
	return strings.EqualFold(strings.TrimSpace(hops[len(hops)-1]), "https")
}
