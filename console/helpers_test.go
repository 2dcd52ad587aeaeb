package console_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/service"
)

// adminToken is the tests' admin token.
const adminToken = "console-test-token"

// startLimiter runs the one-process default (memory store, embedded NATS,
// in-process risk engine) with adminToken and returns its base URL.
func startLimiter(t testing.TB, token string) string {
	t.Helper()
	return startPolicy(t, token, "")
}

// startPolicy is startLimiter under the policy text (the built-in policy
// when "").
func startPolicy(t testing.TB, token, text string) string {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	if os.Getenv("TG_DEBUG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	path := ""
	if text != "" {
		path = filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r, err := service.Start(ctx, service.Config{Listen: "127.0.0.1:0", AdminToken: token, ConfigPath: path, Logger: logger,
		Getenv: func(k string) string {
			if k == "TOLLGATE_USER_KEY" {
				return "test-user-key"
			}
			return os.Getenv(k)
		}})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-r.Done })
	return "http://" + r.Addr
}

// ipLockPolicy is the example policy with a rule that locks an ip (an
// IPv6 client's prefix) at its third failed login.
func ipLockPolicy() string {
	return strings.Replace(string(policy.Example()), "  velocity:\n", "  velocity:\n"+
		"    - {name: ip-failures, event: login_failed, by: ip, threshold: 3, window: 10m, action: lockout, duration: 5m}\n", 1)
}

// newClient returns a client with a cookie jar that does not follow
// redirects (the tests read them).
func newClient(t testing.TB) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 10 * time.Second, Transport: &http.Transport{},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// do sends a request and returns the response with its body read.
func do(t testing.TB, c *http.Client, method, u string, form url.Values, hdr ...string) (*http.Response, string) {
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
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// signIn signs c in and returns the session's CSRF token, read from the
// overview's sign-out form.
func signIn(t testing.TB, c *http.Client, base string) string {
	t.Helper()
	resp, body := do(t, c, "POST", base+"/console/signin", url.Values{"token": {adminToken}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/" {
		t.Fatalf("sign in: %d %s %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	resp, body = do(t, c, "GET", base+"/console/", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("overview after sign-in: %d %s", resp.StatusCode, body)
	}
	return csrfOf(t, body)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([A-Za-z0-9_-]+)"`)

// csrfOf reads the CSRF token of a page's forms.
func csrfOf(t testing.TB, page string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no csrf field in the page: %s", page)
	}
	return m[1]
}

// admin sends an admin API request with the token and decodes a 200
// answer into out.
func admin(t testing.TB, method, u, body string, out any) {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s %s: %d %s", method, u, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, u, err, b)
		}
	}
}

// entry is the part of an admin list entry (lockout, multiplier, audit
// event) the tests read.
type entry struct {
	Subject string   `json:"subject"`
	ID      string   `json:"id"`
	Action  string   `json:"action"`
	Source  string   `json:"source"`
	Value   *float64 `json:"value"`
	Reason  string   `json:"reason"`
	Remote  string   `json:"remote_addr"`
	Kind    string   `json:"kind"`
}

// list GETs an admin list.
func list(t testing.TB, base, path string) []entry {
	t.Helper()
	var out []entry
	admin(t, "GET", base+path, "", &out)
	return out
}

// reportFailedLogins reports n failed logins of account through
// POST /v1/report, the path the risk engine learns them by.
func reportFailedLogins(t testing.TB, base, account string, n int) {
	t.Helper()
	for range n {
		resp, err := http.Post(base+"/v1/report", "application/json", strings.NewReader(`{"type":"login_failed","account":"`+account+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("report: %d", resp.StatusCode)
		}
	}
}

// waitFor polls f until it returns "" or 15 s pass.
func waitFor(t testing.TB, f func() string) {
	t.Helper()
	testenv.Eventually(t, 15*time.Second, f)
}

// lockedAccount reports 10 failed logins of account and waits for the
// risk engine's lockout to be listed.
func lockedAccount(t testing.TB, base, account string) {
	t.Helper()
	reportFailedLogins(t, base, account, 10)
	waitFor(t, func() string {
		for _, e := range list(t, base, "/v1/admin/lockouts") {
			if e.Subject == "account" && e.ID == account {
				return ""
			}
		}
		return "no lockout of " + account + " listed"
	})
}
