package attack

import (
	"fmt"
	"net/http"
	"testing"
)

// Attack: a route spelled with a letter that is not ASCII but that Java's
// case-insensitive comparison takes for an ASCII one (String
// equalsIgnoreCase, which Spring's AntPathMatcher and PathPattern use
// when matching ignores case): "İ" (U+0130) lower-cases to "i", "ı"
// (U+0131) upper-cases to "I", "ſ" (U+017F) to "S", and the Kelvin sign
// (U+212A) lower-cases to "k". Such an upstream serves POST
// /auth/log%C4%B0n as its login and GET /%C5%BFearch as its search, but
// the limiter folded ASCII case only and classed them "write" and
// "read": login-ip (10/min per address) and user-search (20/min) never
// counted them.
// Defence (7.1): route matching folds these four letters onto the ASCII
// letters they map to, as it folds ASCII case.
func TestAttackNonASCIICaseFoldingEvadesRoute(t *testing.T) {
	t.Parallel()
	// the contract's example policy limits searches too
	tg := start(t, withPolicy(t, insertAfter("name: user-read,",
		"  - {name: user-search,   by: [user],            rate: 20/min,  if: {class: expensive}}\n")))
	for i, uri := range []string{
		"/auth/log%C4%B0n", // İ
		"/auth/log%C4%B1n", // ı
		"/AUTH/LOG%C4%B1N",
		"/to%E2%84%AAen", // Kelvin sign
	} {
		wantLoginIPLimit(t, tg, uri, fmt.Sprintf("198.51.100.%d", 40+i))
	}
	allowed := 0
	for range 22 {
		h := bearer(apiToken)
		h.Set("X-Forwarded-Method", "GET")
		h.Set("X-Forwarded-Uri", "/%C5%BFearch?q=x") // ſ
		h.Set("X-Forwarded-For", "198.51.100.50")
		h.Set("X-User-Id", "mallory")
		h.Set("X-User-Signature", sign("mallory"))
		if code, _ := do(t, "GET", tg.api+"/v1/forward-auth", "", h); code == http.StatusOK {
			allowed++
		}
	}
	if allowed != 20 {
		t.Errorf("GET /%%C5%%BFearch: %d of 22 searches of one user allowed; want 20 (user-search, 20/min)", allowed)
	}
}

// Attack: Spring MVC's suffix pattern matching (on by default before
// Spring 5.3) serves "/auth/login" for "/auth/login.*": any suffix after a
// dot of the last segment, an empty one ("/auth/login.") and several
// ("/auth/login.json.bak") too. The limiter took a format suffix only as
// one dot and 1-8 letters or digits, so these were "* *", the write
// class: login-ip (10 a minute per address) never counted them.
// Defence (7.1): the route is also tried without everything from the
// first dot of the last segment on.
func TestAttackSuffixPatternEvadesRoute(t *testing.T) {
	t.Parallel()
	tg := start(t)
	for i, uri := range []string{"/auth/login.", "/auth/login.json.bak", "/auth/login.x-y"} {
		wantLoginIPLimit(t, tg, uri, fmt.Sprintf("198.51.100.%d", 70+i))
	}
}

// wantLoginIPLimit sends 12 login attempts to uri from ip through forward
// auth and wants 10 allowed: login-ip (10/min) counted them as logins.
func wantLoginIPLimit(t *testing.T, tg *target, uri, ip string) {
	t.Helper()
	allowed := 0
	for range 12 {
		if tg.forwardAuth(t, "POST", uri, ip) == http.StatusOK {
			allowed++
		}
	}
	if allowed != 10 {
		t.Errorf("POST %s: %d of 12 attempts from one address allowed; want 10 (login-ip, 10/min)", uri, allowed)
	}
}
