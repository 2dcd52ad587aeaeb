package attack

import (
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// consoleClient is an operator's browser: a cookie jar, redirects not
// followed (the tests read them).
func consoleClient(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// consoleDo sends a console request (a form when form is not nil) and
// returns the status, the Location and the body.
func consoleDo(t *testing.T, c *http.Client, method, u string, form url.Values) (int, string, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location"), string(b)
}

// consoleSignIn signs the operator in on the API listener.
func (tg *target) consoleSignIn(t *testing.T, c *http.Client) {
	t.Helper()
	if code, loc, body := consoleDo(t, c, "POST", tg.api+"/console/signin", url.Values{"token": {adminToken}}); code != http.StatusSeeOther || loc != "/console/" {
		t.Fatalf("sign in: %d %s %s", code, loc, body)
	}
}

var (
	formRE  = regexp.MustCompile(`(?s)<form method="post" action="([^"]+)"[^>]*>(.*?)</form>`)
	inputRE = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)
	h1RE    = regexp.MustCompile(`<h1>([^<]*)</h1>`)
)

// postedForm returns the hidden fields of the page's first form posting to
// action, as a browser would send them.
func postedForm(t *testing.T, page, action string) url.Values {
	t.Helper()
	for _, f := range formRE.FindAllStringSubmatch(page, -1) {
		if f[1] != action {
			continue
		}
		v := url.Values{}
		for _, in := range inputRE.FindAllStringSubmatch(f[2], -1) {
			v.Set(html.UnescapeString(in[1]), html.UnescapeString(in[2]))
		}
		return v
	}
	t.Fatalf("no form posting to %s on the page:\n%s", action, page)
	return nil
}

// title is the page's h1.
func title(page string) string {
	m := h1RE.FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// TestAttackConsoleBackToAnotherSubject: the attacker types the account
// "ceo@example.com#x" into the login form until it is locked. The operator
// opens its subject page in the console and lifts the lockout; the change
// sends the browser back to the page it came from. That return address
// carried the id unescaped, so the browser dropped "#x" as a fragment and
// the operator landed on the page of ceo@example.com, under a flash that
// named the attacker's account: the next change made "on this page" (a
// block, a clear) hit the CEO. The return address must name the subject
// the page showed, whatever its id holds ("#", "&", "+", "%").
func TestAttackConsoleBackToAnotherSubject(t *testing.T) {
	t.Parallel()
	tg := start(t)
	for _, id := range []string{"ceo@example.com#x", "ceo@example.com&id=x", "ceo+x@example.com", "100%"} {
		for range 10 {
			if code, body := do(t, "POST", tg.api+"/v1/report", `{"type":"login_failed","account":"`+id+`"}`, bearer(apiToken)); code != 202 {
				t.Fatalf("report: %d %s", code, body)
			}
		}
	}
	c := consoleClient(t)
	tg.consoleSignIn(t, c)
	for _, id := range []string{"ceo@example.com#x", "ceo@example.com&id=x", "ceo+x@example.com", "100%"} {
		page := tg.api + "/console/subjects?" + url.Values{"subject": {"account"}, "id": {id}}.Encode()
		var body string
		eventually(t, 15*time.Second, func() string {
			var code int
			if code, _, body = consoleDo(t, c, "GET", page, nil); code != 200 || !strings.Contains(body, `action="/console/lockouts/lift"`) {
				return id + ": no lockout on its page yet"
			}
			return ""
		})
		if got := title(body); got != "account "+id {
			t.Fatalf("%s: subject page titled %q", id, got)
		}
		code, loc, out := consoleDo(t, c, "POST", tg.api+"/console/lockouts/lift", postedForm(t, body, "/console/lockouts/lift"))
		if code != http.StatusSeeOther {
			t.Fatalf("%s: lift answered %d %s", id, code, out)
		}
		next, err := url.Parse(tg.api + "/console/")
		if err != nil {
			t.Fatal(err)
		}
		next, err = next.Parse(loc) // as the browser resolves it, the fragment dropped
		if err != nil {
			t.Fatalf("%s: Location %q: %v", id, loc, err)
		}
		next.Fragment = ""
		_, _, back := consoleDo(t, c, "GET", next.String(), nil)
		if got := title(back); got != "account "+id {
			t.Errorf("%s: after the lift the operator is sent to %q, a page titled %q (flash: %q)", id, loc, got, flash(back))
		}
	}
}

var flashRE = regexp.MustCompile(`<p class="flash[^"]*" role="status">([^<]*)</p>`)

// flash is the page's flash message.
func flash(page string) string {
	m := flashRE.FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// TestAttackConsoleDotSegmentIDs: the attacker sends its flood with the
// device id ".." (and logs in as the account "."), ids the proxy takes as
// any other. The operator finds the device among the offenders and blocks
// it on its console page; the console built the admin call's path with
// the id as a path segment, ".." a dot segment, so the admin API's router
// cleaned it away: the subject's page showed an error ("Moved
// Permanently"), the block was refused ("PUT is not allowed here; use
// GET") and the lockout of "." could not be lifted. The attacker's id
// kept its traffic out of the console's reach.
func TestAttackConsoleDotSegmentIDs(t *testing.T) {
	t.Parallel()
	tg := start(t)
	for range 10 {
		if code, body := do(t, "POST", tg.api+"/v1/report", `{"type":"login_failed","account":"."}`, bearer(apiToken)); code != 202 {
			t.Fatalf("report: %d %s", code, body)
		}
	}
	if code, body := do(t, "GET", tg.public+"/items", "", from("203.0.113.5", "X-Device-Id", "..")); code != 200 {
		t.Fatalf("the attacker's device before the block: %d %s", code, body)
	}
	c := consoleClient(t)
	tg.consoleSignIn(t, c)

	page := tg.api + "/console/subjects?" + url.Values{"subject": {"device"}, "id": {".."}}.Encode()
	code, _, body := consoleDo(t, c, "GET", page, nil)
	if code != 200 || title(body) != "device .." {
		t.Fatalf("the device's page: %d, titled %q, error %q", code, title(body), pageError(body))
	}
	form := postedForm(t, body, "/console/multipliers/set")
	form.Set("multiplier", "0")
	form.Set("reason", "flood")
	if code, loc, out := consoleDo(t, c, "POST", tg.api+"/console/multipliers/set", form); code != http.StatusSeeOther {
		t.Fatalf("block: %d %s %s", code, loc, out)
	}
	if _, _, back := consoleDo(t, c, "GET", page, nil); !strings.Contains(flash(back), "Set multiplier 0") {
		t.Fatalf("block of device ..: %q", flash(back))
	}
	if code, body := do(t, "GET", tg.public+"/items", "", from("203.0.113.6", "X-Device-Id", "..")); code != http.StatusTooManyRequests {
		t.Fatalf("the blocked device ..: %d %s", code, body)
	}

	page = tg.api + "/console/subjects?" + url.Values{"subject": {"account"}, "id": {"."}}.Encode()
	eventually(t, 15*time.Second, func() string {
		if _, _, body = consoleDo(t, c, "GET", page, nil); !strings.Contains(body, `action="/console/lockouts/lift"`) {
			return "account . not shown locked: " + pageError(body)
		}
		return ""
	})
	if code, loc, out := consoleDo(t, c, "POST", tg.api+"/console/lockouts/lift", postedForm(t, body, "/console/lockouts/lift")); code != http.StatusSeeOther {
		t.Fatalf("lift: %d %s %s", code, loc, out)
	}
	if _, _, back := consoleDo(t, c, "GET", page, nil); !strings.Contains(flash(back), "Lifted the lockout of account .") {
		t.Fatalf("lift of account .: %q", flash(back))
	}
	if ids := tg.lockouts(t); len(ids) != 0 {
		t.Fatalf("lockouts after the lift: %q", ids)
	}
}

var errorRE = regexp.MustCompile(`<p class="flash bad" role="alert">([^<]*)</p>`)

// pageError is the page's error message.
func pageError(page string) string {
	m := errorRE.FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// TestAttackConsoleCookieNotSecureBehindTLSBalancer: the console is
// reached through the load balancer that terminates TLS (it says so with
// X-Forwarded-Proto: https). The session cookie was Secure only when the
// limiter itself served TLS, so behind the balancer it went out without
// Secure: a network attacker who makes the operator's browser load any
// http:// URL of the console's host (an image on a page it can inject
// into) reads the session in clear and has the console. Through a
// trusted proxy that says https, the cookie is Secure.
func TestAttackConsoleCookieNotSecureBehindTLSBalancer(t *testing.T) {
	t.Parallel()
	tg := start(t)
	req, err := http.NewRequest("POST", tg.api+"/console/signin", strings.NewReader(url.Values{"token": {adminToken}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-For", "198.51.100.23") // the balancer, on loopback, is a trusted proxy
	req.Header.Set("X-Forwarded-Proto", "https")
	resp, err := consoleClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	sc := resp.Header.Get("Set-Cookie")
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(sc, "tollgate_console=") {
		t.Fatalf("sign in: %d %q", resp.StatusCode, sc)
	}
	if !strings.Contains(sc, "; Secure") {
		t.Fatalf("session cookie behind a TLS balancer: %q, without Secure", sc)
	}
}
