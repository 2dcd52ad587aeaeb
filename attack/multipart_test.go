package attack

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// multipartLogin is a login as a multipart/form-data body (what an HTML
// form with enctype="multipart/form-data", curl -F or a mobile HTTP
// library's "form data" sends), with the parts given as name, value.
func multipartLogin(parts ...string) (contentType, body string) {
	const boundary = "tollgate-attack"
	var b strings.Builder
	for i := 0; i+1 < len(parts); i += 2 {
		fmt.Fprintf(&b, "--%s\r\nContent-Disposition: form-data; name=%q\r\n\r\n%s\r\n", boundary, parts[i], parts[i+1])
	}
	fmt.Fprintf(&b, "--%s--\r\n", boundary)
	return "multipart/form-data; boundary=" + boundary, b.String()
}

// Attack: the login guesses are sent as multipart/form-data. Go's
// r.FormValue (and Rails' params, Laravel's input(), Spring's
// @RequestParam, PHP's $_POST) read such a body as readily as a
// url-encoded one, so the upstream checks the victim's password; the
// limiter read JSON and url-encoded bodies only, found no account, and
// neither login-account (5/min) nor the account's lockout ever applied:
// 30 of 30 guesses reached the upstream, and riskd counted no failure.
// Defence (6.4): the proxy reads a multipart/form-data body's fields as
// it reads a url-encoded form's, and a field given twice (in the body
// and the query string too) is 400.
func TestAttackMultipartLoginEvadesAccountLimit(t *testing.T) {
	t.Parallel()
	tg := start(t)
	const victim = "victim-multipart"
	allowed := 0
	for i := 0; i < 30; i++ {
		ct, body := multipartLogin("username", victim, "password", "guess")
		if guess(t, tg, i, "/auth/login", ct, body) == http.StatusUnauthorized {
			allowed++
		}
	}
	if allowed > 5 {
		t.Errorf("%d of 30 multipart guesses on %q were answered by the upstream; want at most 5 (login-account)", allowed, victim)
	}
	if n := tg.up.attemptsOn(victim); n != allowed {
		t.Errorf("the upstream read %d guesses on %q from %d it answered; want every one (it reads multipart logins)", n, victim, allowed)
	}
	ct, body := multipartLogin("username", "decoy", "password", "guess")
	if code, resp := do(t, "POST", tg.public+"/auth/login?username="+victim, body, from("198.18.11.1", "Content-Type", ct)); code != http.StatusBadRequest {
		t.Errorf("the field in the query and the multipart body: %d %.120s; want 400", code, resp)
	}
	ct, body = multipartLogin("username", "decoy", "username", victim, "password", "guess")
	if code, resp := do(t, "POST", tg.public+"/auth/login", body, from("198.18.11.2", "Content-Type", ct)); code != http.StatusBadRequest {
		t.Errorf("the field twice in the multipart body: %d %.120s; want 400", code, resp)
	}
}
