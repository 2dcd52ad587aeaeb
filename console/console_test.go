package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// pages are every page of a signed-in console.
var pages = []string{"/console/", "/console/lockouts", "/console/multipliers", "/console/offenders",
	"/console/subjects", "/console/subjects?subject=account&id=alice", "/console/audit", "/console/alerts"}

// checkHeaders fails unless resp carries the console's security headers.
func checkHeaders(t *testing.T, what string, resp *http.Response) {
	t.Helper()
	if got := resp.Header.Get("Content-Security-Policy"); got != "default-src 'self'" {
		t.Errorf("%s: Content-Security-Policy %q", what, got)
	}
	if got := resp.Header.Get("X-Frame-Options"); got != "DENY" {
		t.Errorf("%s: X-Frame-Options %q", what, got)
	}
}

// TestConsoleOffWithoutAdminToken: no admin token, no console.
func TestConsoleOffWithoutAdminToken(t *testing.T) {
	t.Parallel()
	base := startLimiter(t, "")
	c := newClient(t)
	for _, p := range []string{"/console/", "/console/signin", "/console/static/style.css"} {
		if resp, _ := do(t, c, "GET", base+p, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, resp.StatusCode)
		}
	}
	if resp, _ := do(t, c, "POST", base+"/console/signin", url.Values{"token": {""}}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST signin: %d, want 404", resp.StatusCode)
	}
}

// TestSignInSessionCookie signs in over plain HTTP: the cookie is
// HttpOnly, SameSite=Strict, not Secure, scoped to /console/ and ends in
// 12 h; every page then answers 200 with the security headers; signing
// out ends the session.
func TestSignInSessionCookie(t *testing.T) {
	t.Parallel()
	base := startLimiter(t, adminToken)
	c := newClient(t)
	resp, _ := do(t, c, "GET", base+"/console/", nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/signin" {
		t.Fatalf("signed out overview: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	checkHeaders(t, "redirect", resp)
	resp, body := do(t, c, "GET", base+"/console/signin", nil)
	if resp.StatusCode != 200 || !strings.Contains(body, `name="token"`) {
		t.Fatalf("sign-in form: %d %s", resp.StatusCode, body)
	}
	checkHeaders(t, "sign-in form", resp)

	resp, _ = do(t, c, "POST", base+"/console/signin", url.Values{"token": {adminToken}})
	var ck *http.Cookie
	for _, k := range resp.Cookies() {
		if k.Name == "tollgate_console" {
			ck = k
		}
	}
	if ck == nil {
		t.Fatalf("no session cookie: %v", resp.Header["Set-Cookie"])
	}
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure || ck.Path != "/console/" || ck.MaxAge != 12*3600 || len(ck.Value) < 40 {
		t.Fatalf("cookie %q: want HttpOnly, SameSite=Strict, not Secure over HTTP, Path=/console/, Max-Age=43200, a long value", resp.Header.Get("Set-Cookie"))
	}
	for _, p := range pages {
		resp, body := do(t, c, "GET", base+p, nil)
		if resp.StatusCode != 200 || !strings.Contains(body, "Sign out") {
			t.Errorf("GET %s: %d %.300s", p, resp.StatusCode, body)
		}
		checkHeaders(t, p, resp)
	}
	for _, p := range []string{"/console/static/style.css", "/console/static/app.js"} {
		resp, _ := do(t, c, "GET", base+p, nil)
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: %d", p, resp.StatusCode)
		}
		checkHeaders(t, p, resp)
	}

	csrf := signIn(t, c, base)
	resp, _ = do(t, c, "POST", base+"/console/signout", url.Values{"csrf": {csrf}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/signin" {
		t.Fatalf("sign out: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ := do(t, c, "GET", base+"/console/lockouts", nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("after sign-out: %d, want the sign-in redirect", resp.StatusCode)
	}
}

// TestWrongTokenAnswered401AndThrottled: a wrong token is answered 401
// with the form and a message; ten from one address block it, for the
// form and for the admin API alike (one throttle), even with the right
// token.
func TestWrongTokenAnswered401AndThrottled(t *testing.T) {
	t.Parallel()
	base := startLimiter(t, adminToken)
	c := newClient(t)
	for i := range 10 {
		resp, body := do(t, c, "POST", base+"/console/signin", url.Values{"token": {"guess"}})
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "That is not the admin token.") || !strings.Contains(body, `name="token"`) {
			t.Fatalf("wrong token %d: %d %s", i, resp.StatusCode, body)
		}
		checkHeaders(t, "401", resp)
		if len(resp.Cookies()) != 0 {
			t.Fatalf("wrong token set a cookie: %v", resp.Cookies())
		}
	}
	resp, body := do(t, c, "POST", base+"/console/signin", url.Values{"token": {adminToken}})
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "Too many wrong tokens") {
		t.Fatalf("right token after 10 wrong: %d %s", resp.StatusCode, body)
	}
	resp, _ = do(t, c, "GET", base+"/v1/admin/lockouts", nil, "Authorization", "Bearer "+adminToken)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("admin API after 10 wrong sign-ins: %d, want 429", resp.StatusCode)
	}
}

// TestChangesNeedTheSessionsCSRFToken: a change without the session's
// CSRF token (none, another session's, or from another origin) is
// refused 403 and changes nothing; with it, it is the admin API's
// action: in force and audited with the operator's address.
func TestChangesNeedTheSessionsCSRFToken(t *testing.T) {
	t.Parallel()
	base := startLimiter(t, adminToken)
	c, other := newClient(t), newClient(t)
	csrf, otherCSRF := signIn(t, c, base), signIn(t, other, base)
	if csrf == otherCSRF {
		t.Fatal("two sessions share a CSRF token")
	}
	form := url.Values{"subject": {"ip"}, "id": {"192.0.2.77"}, "multiplier": {"0.25"}, "ttl": {"1h"}, "reason": {"console test"}}
	for name, f := range map[string]url.Values{"none": form, "another session's": with(form, "csrf", otherCSRF), "wrong": with(form, "csrf", "x")} {
		resp, body := do(t, c, "POST", base+"/console/multipliers/set", f)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "CSRF") {
			t.Fatalf("%s csrf: %d %s", name, resp.StatusCode, body)
		}
		checkHeaders(t, "403", resp)
	}
	resp, _ := do(t, c, "POST", base+"/console/multipliers/set", with(form, "csrf", csrf), "Origin", "http://evil.example")
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin: %d", resp.StatusCode)
	}
	if resp, _ := do(t, newClient(t), "POST", base+"/console/multipliers/set", with(form, "csrf", csrf)); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("no session: %d", resp.StatusCode)
	}
	if ms, au := list(t, base, "/v1/admin/multipliers"), list(t, base, "/v1/admin/audit"); len(ms) != 0 || len(au) != 0 {
		t.Fatalf("refused changes changed something: multipliers %+v, audit %+v", ms, au)
	}

	resp, _ = do(t, c, "POST", base+"/console/multipliers/set", with(with(form, "csrf", csrf), "back", "/console/multipliers"))
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/multipliers" {
		t.Fatalf("set: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	_, page := do(t, c, "GET", base+"/console/multipliers", nil)
	if !strings.Contains(page, "Set multiplier 0.25 on ip 192.0.2.77.") || !strings.Contains(page, "console test") {
		t.Fatalf("multipliers page after set: %s", page)
	}
	ms := list(t, base, "/v1/admin/multipliers")
	au := list(t, base, "/v1/admin/audit")
	if len(ms) != 1 || ms[0].ID != "192.0.2.77" || ms[0].Source != "admin" || *ms[0].Value != 0.25 {
		t.Fatalf("multipliers = %+v", ms)
	}
	if len(au) != 1 || au[0].Action != "multiplier_set" || au[0].Reason != "console test" || !strings.HasPrefix(au[0].Remote, "127.0.0.1:") {
		t.Fatalf("audit = %+v, want the set with the operator's address", au)
	}
	resp, body := do(t, c, "POST", base+"/console/multipliers/set", url.Values{"csrf": {csrf}, "subject": {"ip"}, "id": {"not-an-ip"}, "multiplier": {"0.5"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("bad id: %d %s", resp.StatusCode, body)
	}
	if _, page := do(t, c, "GET", base+"/console/", nil); !strings.Contains(page, `id &#34;not-an-ip&#34; is not an IP address`) {
		t.Fatalf("the API's refusal is not shown: %s", page)
	}
	do(t, c, "POST", base+"/console/multipliers/clear", url.Values{"csrf": {csrf}, "subject": {"ip"}, "id": {"192.0.2.77"}})
	if ms := list(t, base, "/v1/admin/multipliers"); len(ms) != 0 {
		t.Fatalf("after clear: %+v", ms)
	}
	if au := list(t, base, "/v1/admin/audit"); len(au) != 2 || au[0].Action != "multiplier_clear" {
		t.Fatalf("audit after clear = %+v", au)
	}
}

// with returns a copy of v with k set to val.
func with(v url.Values, k, val string) url.Values {
	out := url.Values{}
	for key, vs := range v {
		out[key] = append([]string(nil), vs...)
	}
	out.Set(k, val)
	return out
}

// TestSessionOutlastsThrottle: a session signed in before its address
// was throttled (wrong tokens from the same office NAT or VPN egress)
// keeps working: its pages and changes are no token guesses. The
// address's bearer calls and sign-ins stay throttled.
func TestSessionOutlastsThrottle(t *testing.T) {
	t.Parallel()
	base := startLimiter(t, adminToken)
	c := newClient(t)
	csrf := signIn(t, c, base)
	for range 10 {
		do(t, newClient(t), "GET", base+"/v1/admin/lockouts", nil, "Authorization", "Bearer guess")
	}
	if resp, _ := do(t, newClient(t), "GET", base+"/v1/admin/lockouts", nil, "Authorization", "Bearer "+adminToken); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("admin API after 10 wrong tokens: %d, want 429", resp.StatusCode)
	}
	resp, page := do(t, c, "GET", base+"/console/multipliers", nil)
	if resp.StatusCode != http.StatusOK || strings.Contains(page, "too many failed") {
		t.Fatalf("the signed-in session's page after its address was throttled: %d %s", resp.StatusCode, page)
	}
	form := url.Values{"csrf": {csrf}, "subject": {"ip"}, "id": {"192.0.2.78"}, "multiplier": {"0.5"}, "back": {"/console/multipliers"}}
	if resp, body := do(t, c, "POST", base+"/console/multipliers/set", form); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("set: %d %s", resp.StatusCode, body)
	}
	if _, page := do(t, c, "GET", base+"/console/multipliers", nil); !strings.Contains(page, "Set multiplier 0.5 on ip 192.0.2.78.") {
		t.Fatalf("multipliers page after set: %s", page)
	}
	if resp, _ := do(t, newClient(t), "POST", base+"/console/signin", url.Values{"token": {adminToken}}); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a new sign-in from the throttled address: %d, want 429", resp.StatusCode)
	}
}
