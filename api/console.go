package api

import (
	"context"
	"net/http"
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
