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
