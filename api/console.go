package api

import (
	"net/http"
	"time"
)

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
