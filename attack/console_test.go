package attack

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium starts headless Chromium (Debian's chromium, which
// scripts/ensure-services installs) with a fresh profile.
func chromium(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium not found on PATH (scripts/ensure-services installs it): %v", err)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(path), chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true))
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	return ctx
}

// lockouts lists the ids of the lockouts in force.
func (tg *target) lockouts(t *testing.T) []string {
	t.Helper()
	code, body := do(t, "GET", tg.api+"/v1/admin/lockouts", "", bearer(adminToken))
	if code != 200 {
		t.Fatalf("lockouts: %d %s", code, body)
	}
	var list []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range list {
		ids = append(ids, e.ID)
	}
	return ids
}

// TestConsoleCrossSiteLift: an operator signed in to the console visits
// the attacker's page, which submits a form lifting the lockout of the
// account the attacker is brute-forcing. The console refuses it (403:
// no CSRF token, another origin), the lockout stays and nothing is
// audited. And the public listener never serves the console.
func TestConsoleCrossSiteLift(t *testing.T) {
	t.Parallel()
	tg := start(t)
	const victim = "ceo@example.com"
	for range 10 {
		if code, body := do(t, "POST", tg.api+"/v1/report", `{"type":"login_failed","account":"`+victim+`"}`, bearer(apiToken)); code != 202 {
			t.Fatalf("report: %d %s", code, body)
		}
	}
	eventually(t, 15*time.Second, func() string {
		if ids := tg.lockouts(t); len(ids) != 1 || ids[0] != victim {
			return "lockouts " + strings.Join(ids, ",")
		}
		return ""
	})
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(`<!doctype html><form id="f" method="post" action="` + tg.api + `/console/lockouts/lift">
<input name="subject" value="account"><input name="id" value="` + victim + `"></form>
<script>document.getElementById("f").submit()</script>`))
	}))
	defer evil.Close()

	ctx := chromium(t)
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, chromedp.Navigate(tg.api+"/console/signin"), chromedp.SendKeys(chromedp.ID("token"), adminToken),
		chromedp.Submit(chromedp.ID("token")), chromedp.WaitVisible(chromedp.CSS(".tiles"))); err != nil {
		t.Fatalf("operator signs in: %v", err)
	}
	if err := chromedp.Do(sctx, chromedp.Navigate(evil.URL)); err != nil {
		t.Fatalf("operator visits the attacker's page: %v", err)
	}
	var title string
	var status int
	eventually(t, 15*time.Second, func() string { // the page submits the form as it loads
		loc, err := chromedp.Run(sctx, chromedp.Location())
		if err != nil || !strings.HasPrefix(loc, tg.api+"/console/") {
			return "still at " + loc
		}
		if title, err = chromedp.Run(sctx, chromedp.Text(chromedp.CSS("h1"))); err != nil {
			return err.Error()
		}
		status, err = chromedp.Run(sctx, chromedp.Evaluate[int](`performance.getEntriesByType("navigation")[0].responseStatus`))
		if err != nil {
			return err.Error()
		}
		return ""
	})
	if status != http.StatusForbidden || title != "Refused" {
		t.Fatalf("forged lift answered %d %q, want 403 Refused", status, title)
	}
	if ids := tg.lockouts(t); len(ids) != 1 || ids[0] != victim {
		t.Fatalf("lockouts after the forged lift: %v", ids)
	}
	if code, body := do(t, "GET", tg.api+"/v1/admin/audit", "", bearer(adminToken)); code != 200 || strings.TrimSpace(body) != "[]" {
		t.Fatalf("audit after the forged lift: %d %s", code, body)
	}

	if _, body := do(t, "GET", tg.public+"/console/", "", nil); strings.Contains(body, "security console") {
		t.Fatalf("the public listener served the console: %s", body)
	}
}
