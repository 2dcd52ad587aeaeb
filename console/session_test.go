package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestSignInAgainEndsTheOldSession: signing in again from a browser that
// holds a session (a stale sign-in tab, a second sign-in) replaced the
// cookie but left the old session alive for the rest of its 12 h, and
// signing out ended only the new one: a copy of the old cookie kept the
// console open after the operator signed out. A sign-in ends the session
// the browser held.
func TestSignInAgainEndsTheOldSession(t *testing.T) {
	t.Parallel()
	base := startLimiter(t, adminToken)
	c := newClient(t)
	resp, _ := do(t, c, "POST", base+"/console/signin", url.Values{"token": {adminToken}})
	var old string
	for _, k := range resp.Cookies() {
		if k.Name == "tollgate_console" {
			old = k.Value
		}
	}
	if old == "" {
		t.Fatalf("no session cookie: %v", resp.Header["Set-Cookie"])
	}
	csrf := signIn(t, c, base) // again, from the same browser
	if resp, _ := do(t, c, "POST", base+"/console/signout", url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out: %d", resp.StatusCode)
	}
	copyOfOld := newClient(t)
	u, _ := url.Parse(base + "/console/")
	copyOfOld.Jar.SetCookies(u, []*http.Cookie{{Name: "tollgate_console", Value: old, Path: "/console/"}})
	if resp, _ := do(t, copyOfOld, "GET", base+"/console/lockouts", nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the first session's cookie after sign-in again and sign-out: %d, want the sign-in redirect", resp.StatusCode)
	}
}

// TestForwardedProtoFromAnUntrustedPeer: X-Forwarded-Proto makes the
// session cookie Secure only from a trusted proxy; the one-process
// default trusts none, so it is not believed.
func TestForwardedProtoFromAnUntrustedPeer(t *testing.T) {
	t.Parallel()
	base := startLimiter(t, adminToken)
	resp, _ := do(t, newClient(t), "POST", base+"/console/signin", url.Values{"token": {adminToken}}, "X-Forwarded-Proto", "https")
	if sc := resp.Header.Get("Set-Cookie"); resp.StatusCode != http.StatusSeeOther || strings.Contains(sc, "Secure") {
		t.Fatalf("sign-in with X-Forwarded-Proto from an untrusted peer: %d %q", resp.StatusCode, sc)
	}
}
