package console_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// browser starts headless Chromium (Debian's chromium; scripts/ensure-
// services installs it) with a fresh profile and returns a tab's context.
func browser(t *testing.T, width, height int64) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium not found on PATH (scripts/ensure-services installs Debian's chromium): %v", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.UserDataDir(t.TempDir()), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.WindowSize(int(width), int(height)),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-extensions", true), chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, height)); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// step runs actions in the tab (within 30 s), failing the test on an error.
func step(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// value runs one action that returns a value, failing the test on an error.
func value[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(sctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// load runs actions that load a page and returns its document's response.
func load(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) *network.Response {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := chromedp.RunResponse(sctx, actions...)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return resp
}

// header reads a response header case-insensitively.
func header(r *network.Response, name string) string {
	for k, v := range r.Headers {
		if strings.EqualFold(k, name) {
			s, _ := v.(string)
			return s
		}
	}
	return ""
}

// checkBrowserHeaders fails unless a page loaded in the browser carried
// the console's security headers.
func checkBrowserHeaders(t *testing.T, what string, r *network.Response) {
	t.Helper()
	if header(r, "Content-Security-Policy") != "default-src 'self'" || header(r, "X-Frame-Options") != "DENY" {
		t.Errorf("%s: headers %v", what, r.Headers)
	}
}

// signInBrowser submits the sign-in form with token and returns the
// answer's document (the overview after the redirect, or the form again).
func signInBrowser(t *testing.T, ctx context.Context, base, token string) *network.Response {
	t.Helper()
	checkBrowserHeaders(t, "sign-in form", load(t, ctx, "sign-in form", chromedp.Navigate(base+"/console/signin")))
	return load(t, ctx, "sign in", chromedp.WaitVisible(chromedp.ID("token")), chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Submit(chromedp.ID("token")))
}

// TestBrowserLiftLockout drives the console in Chromium: a wrong token is
// answered 401 with the form and a message; signed in, the lockout the
// risk engine made from ten failed logins (reported through /v1/report)
// is listed; Lift lifts it (gone from the page and the API, the login
// allowed again, the lift in the audit trail); a POST without the CSRF
// token is refused 403; every page carries CSP and X-Frame-Options.
func TestBrowserLiftLockout(t *testing.T) {
	t.Parallel()
	base := startLimiter(t, adminToken)
	const victim = "victim@example.com"
	lockedAccount(t, base, victim)
	ctx := browser(t, 1280, 800)

	resp := signInBrowser(t, ctx, base, "not-the-token")
	msg := value(t, ctx, "message", chromedp.Text(chromedp.CSS(".flash.bad")))
	if resp.Status != http.StatusUnauthorized || msg != "That is not the admin token." {
		t.Fatalf("wrong token: %d, message %q; want 401 and the message", resp.Status, msg)
	}
	checkBrowserHeaders(t, "401", resp)

	resp = signInBrowser(t, ctx, base, adminToken)
	if resp.Status != 200 || resp.URL != base+"/console/" {
		t.Fatalf("after sign-in: %d at %s", resp.Status, resp.URL)
	}
	checkBrowserHeaders(t, "overview", resp)

	lift := chromedp.CSS(`button.lift[data-subject="account"][data-id="` + victim + `"]`)
	resp = load(t, ctx, "lockouts", chromedp.Navigate(base+"/console/lockouts"))
	checkBrowserHeaders(t, "lockouts", resp)
	step(t, ctx, "lockout listed", chromedp.WaitVisible(lift))
	table := value(t, ctx, "lockouts table", chromedp.Text(chromedp.CSS("table.list")))
	if !strings.Contains(table, victim) || !strings.Contains(table, "lockout") || !strings.Contains(table, "in 1") {
		t.Fatalf("lockouts table: %q", table)
	}
	resp = load(t, ctx, "lift", chromedp.Click(lift))
	msg = value(t, ctx, "flash", chromedp.Text(chromedp.CSS(".flash")))
	if resp.Status != 200 || msg != "Lifted the lockout of account "+victim+"." {
		t.Fatalf("after lift: %d %q", resp.Status, msg)
	}
	if still := value(t, ctx, "gone", chromedp.Evaluate[bool](`document.querySelector('`+string(lift)+`') !== null`)); still {
		t.Fatal("the lifted lockout is still listed")
	}
	for _, e := range list(t, base, "/v1/admin/lockouts") {
		if e.ID == victim {
			t.Fatalf("the API still lists the lockout: %+v", e)
		}
	}
	check, err := http.Post(base+"/v1/check", "application/json",
		strings.NewReader(`{"endpoint":"POST /auth/login","ip":"198.51.100.7","account":"`+victim+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	check.Body.Close()
	if check.StatusCode != 200 {
		t.Fatalf("login check after the lift: %d", check.StatusCode)
	}

	checkBrowserHeaders(t, "audit", load(t, ctx, "audit", chromedp.Navigate(base+"/console/audit")))
	trail := value(t, ctx, "audit row", chromedp.Text(chromedp.CSS("table.list tbody tr")))
	if !strings.Contains(trail, "lockout lift") || !strings.Contains(trail, victim) || !strings.Contains(trail, "was in force") {
		t.Fatalf("newest audit row: %q", trail)
	}

	status := value(t, ctx, "csrf-less post", chromedp.Evaluate[int](`fetch('/console/lockouts/lift', {method: 'POST',
		headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: 'subject=account&id=x'}).then(r => r.status)`,
		chromedp.EvalAwaitPromise))
	if status != http.StatusForbidden {
		t.Fatalf("POST without the CSRF token: %d, want 403", status)
	}
	if au := list(t, base, "/v1/admin/audit"); len(au) != 1 {
		t.Fatalf("audit after the refused POST: %+v", au)
	}
}

// TestBrowserScreenshots loads every page of a console with sample data
// in Chromium (1280x800, and the lockouts on a phone, 390x844) and saves
// each as PNG: docs/console/ is made by running it with
// TOLLGATE_CONSOLE_SCREENSHOTS=$PWD/docs/console (otherwise into a temp dir).
func TestBrowserScreenshots(t *testing.T) {
	t.Parallel()
	dir := os.Getenv("TOLLGATE_CONSOLE_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	base := startLimiter(t, adminToken)
	sampleData(t, base)
	shots := []struct{ name, path, ready string }{
		{"overview", "/console/", ".tiles"},
		{"lockouts", "/console/lockouts", "table.list"},
		{"multipliers", "/console/multipliers", "table.list"},
		{"offenders", "/console/offenders", "table.list"},
		{"subject", "/console/subjects?subject=account&id=alice%40example.com", ".big"},
		{"audit", "/console/audit", "table.list"},
		{"alerts", "/console/alerts", "table.list"},
	}
	ctx := browser(t, 1280, 800)
	step(t, ctx, "sign-in page", chromedp.Navigate(base+"/console/signin"), chromedp.WaitVisible(chromedp.ID("token")))
	save(t, dir, "signin", value(t, ctx, "screenshot", chromedp.CaptureScreenshot()))
	if resp := signInBrowser(t, ctx, base, adminToken); resp.Status != 200 {
		t.Fatalf("sign in: %d", resp.Status)
	}
	for _, s := range shots {
		if resp := load(t, ctx, s.name, chromedp.Navigate(base+s.path)); resp.Status != 200 {
			t.Fatalf("%s: %d", s.name, resp.Status)
		}
		step(t, ctx, s.name, chromedp.WaitVisible(chromedp.CSS(s.ready)))
		save(t, dir, s.name, value(t, ctx, "screenshot", chromedp.CaptureScreenshot()))
	}
	step(t, ctx, "phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(1)), chromedp.Navigate(base+"/console/lockouts"),
		chromedp.WaitVisible(chromedp.CSS("table.list")))
	save(t, dir, "lockouts-phone", value(t, ctx, "screenshot", chromedp.CaptureScreenshot()))
}

// save writes a screenshot, failing unless it is a PNG.
func save(t *testing.T, dir, name string, png []byte) {
	t.Helper()
	if len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Fatalf("%s: not a PNG (%d bytes)", name, len(png))
	}
	if err := os.WriteFile(dir+"/"+name+".png", png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// sampleData fills a console: lockouts from failed logins, admin
// multipliers, a repeat offender, allowed and denied decisions, alerts.
func sampleData(t *testing.T, base string) {
	t.Helper()
	for _, a := range []string{"alice@example.com", "bob@example.com", "carol@example.com"} {
		lockedAccount(t, base, a)
	}
	admin(t, "PUT", base+"/v1/admin/multipliers/ip/203.0.113.50", `{"multiplier":0.1,"ttl":"2h","reason":"credential stuffing, ticket SEC-1289"}`, nil)
	admin(t, "PUT", base+"/v1/admin/multipliers/device/d-4411", `{"multiplier":0,"ttl":"24h","reason":"emulator farm"}`, nil)
	admin(t, "PUT", base+"/v1/admin/multipliers/asn/64500", `{"multiplier":0.5,"reason":"hosting provider"}`, nil)
	admin(t, "PUT", base+"/v1/admin/multipliers/user/u-991", `{"multiplier":5,"ttl":"30m","reason":"load test by the mobile team"}`, nil)
	admin(t, "DELETE", base+"/v1/admin/lockouts/carol@example.com", "", nil)
	for i := range 160 {
		ip := "198.51.100.23"
		if i%4 == 0 {
			ip = "192.0.2." + strconv.Itoa(i%50+1)
		}
		resp, err := http.Post(base+"/v1/check", "application/json",
			strings.NewReader(`{"endpoint":"POST /auth/login","ip":"`+ip+`","account":"user`+strconv.Itoa(i%40)+`@example.com"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	waitFor(t, func() string {
		var out struct {
			Offenders []struct{} `json:"offenders"`
		}
		admin(t, "GET", base+"/v1/admin/offenders", "", &out)
		if len(out.Offenders) == 0 {
			return "no offenders listed"
		}
		return ""
	})
}
