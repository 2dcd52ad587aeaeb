package attack

import (
	"fmt"
	"net/http"
	"testing"
)

// Attack: behind Traefik's forwardAuth, the login's account rides in the
// query string after a ";" (POST /auth/login?x=1;username=victim, the
// password in the body). Traefik hands the URI on as sent in
// X-Forwarded-Uri, then forwards the request with every ";" of its query
// turned into "&" (its proxy keeps the separator Go 1.17 dropped), so the
// upstream reads username=victim (Go's FormValue, Rails' params); Rack 2
// and Python's parse_qs before 3.9.2 split at ";" themselves behind NGINX.
// The limiter read the query with Go's url.ParseQuery, which skips a pair
// holding a ";": no account, so login-account (5/min) never applied.
// Defence (6.4): the query string's fields are read split at ";" too.
func TestAttackSemicolonQueryAccountEvadesAccountLimit(t *testing.T) {
	t.Parallel()
	tg := start(t)
	allowed := 0
	for i := range 30 {
		if tg.forwardAuth(t, "POST", "/auth/login?x=1;username=victim-semicolon", fmt.Sprintf("198.18.13.%d", i+1)) == http.StatusOK {
			allowed++
		}
	}
	if allowed > 5 {
		t.Errorf("%d of 30 logins with the account after a ';' in the query string were allowed; want at most 5 (login-account)", allowed)
	}
	h := bearer(apiToken)
	h.Set("X-Forwarded-Method", "POST")
	h.Set("X-Forwarded-Uri", "/auth/login?username=decoy;username=victim-semicolon")
	h.Set("X-Forwarded-For", "198.18.13.99")
	if code, body := do(t, "GET", tg.api+"/v1/forward-auth", "", h); code != http.StatusBadRequest {
		t.Errorf("the field twice in the query string, the second after a ';': %d %.120s; want 400", code, body)
	}
}
