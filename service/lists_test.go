package service

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

const listsPolicy = `version: 1
lists:
  blocked: {file: blocked.txt, kind: ip}
  staff:   {file: staff.txt, kind: account}
allow: [staff]
deny: [blocked]
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "* *", class: write}
limits:
  - {name: free-plan, by: [attr:plan, ip], rate: 2/min, if: {attr: {plan: [free]}}}
  - {name: login-account, by: [account, route], rate: 1000/min, if: {class: auth}}
risk:
  velocity:
    - {name: account-failures, event: login_failed, by: account, threshold: 2, window: 10m, action: lockout, duration: 15m}
`

// TestListsAndAttributesOneProcess runs the whole limiter on the shared
// Redis: attribute keys, deny and allow lists, an allow-listed account
// exempt from limits but not from lockouts (7.1), and list files reloaded as they change (a bad
// line keeps the old entries and is counted).
func TestListsAndAttributesOneProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// write replaces a file atomically, as list files should be written
	// (a temporary file renamed over the old one).
	write := func(name, text string, tick time.Time) {
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		_ = os.Chtimes(tmp, tick, tick)
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	tick := time.Now().Add(-time.Hour)
	write("blocked.txt", "203.0.113.0/24\n", tick)
	write("staff.txt", "Staff@Example.com\n", tick)
	write("p.yaml", listsPolicy, tick)
	prefix := testenv.Prefix(t)
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
		testenv.DeletePrefix(c, prefix)
		_ = c.Close()
	})
	_, base := start(t, Config{ConfigPath: filepath.Join(dir, "p.yaml"), RedisURL: "redis://" + testenv.RedisAddr() + "/0",
		KeyPrefix: prefix, AdminToken: "tok", WatchInterval: 20 * time.Millisecond})

	free := `{"endpoint":"GET /feed","ip":"198.51.100.7","attributes":{"plan":"free"}}`
	for i, want := range []int{200, 200, 429} {
		if resp, body := post(t, base+"/v1/check", free); resp.StatusCode != want {
			t.Fatalf("free request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if resp, _ := post(t, base+"/v1/check", `{"endpoint":"GET /feed","ip":"198.51.100.7","attributes":{"plan":"paid"}}`); resp.StatusCode != 200 {
		t.Fatalf("paid: %d", resp.StatusCode)
	}
	if resp, body := post(t, base+"/v1/check", `{"endpoint":"GET /feed","ip":"203.0.113.4"}`); resp.StatusCode != 403 || !strings.Contains(body, `"code":"DENIED"`) {
		t.Fatalf("blocked ip: %d %s", resp.StatusCode, body)
	}

	// The staff account is exempt from limits, not from lockouts (7.1):
	// its failures lock it out like bob's lock him out.
	for _, acct := range []string{"staff@example.com", "STAFF@example.com", "staff@example.com", "bob", "bob"} {
		if resp, _ := post(t, base+"/v1/report", `{"type":"login_failed","account":"`+acct+`"}`); resp.StatusCode != 202 {
			t.Fatalf("report: %d", resp.StatusCode)
		}
	}
	eventually(t, 10*time.Second, func() string {
		if resp, body := post(t, base+"/v1/check", `{"endpoint":"POST /auth/login","ip":"192.0.2.1","account":"bob"}`); resp.StatusCode != 429 {
			return "bob not locked: " + body
		}
		return ""
	})
	eventually(t, 10*time.Second, func() string {
		if resp, body := post(t, base+"/v1/check", `{"endpoint":"POST /auth/login","ip":"192.0.2.1","account":"staff@example.com"}`); resp.StatusCode != 429 ||
			!strings.Contains(body, `"code":"ACCOUNT_LOCKED"`) {
			return "staff not locked: " + body
		}
		return ""
	})

	// The deny list changes: the new entries are in force, the old gone.
	tick = tick.Add(time.Second)
	write("blocked.txt", "# rotated\n192.0.2.0/24\n", tick)
	eventually(t, 5*time.Second, func() string {
		if resp, _ := post(t, base+"/v1/check", `{"endpoint":"GET /feed","ip":"192.0.2.9"}`); resp.StatusCode != 403 {
			return "new entry not denied"
		}
		return ""
	})
	if resp, _ := post(t, base+"/v1/check", `{"endpoint":"GET /feed","ip":"203.0.113.4"}`); resp.StatusCode != 200 {
		t.Fatalf("old entry still denied: %d", resp.StatusCode)
	}
	// A bad line: refused and counted, the old entries stay.
	tick = tick.Add(time.Second)
	write("blocked.txt", "203.0.113.0/24\nnot an address\n", tick)
	eventually(t, 5*time.Second, func() string {
		_, m := get(t, base+"/metrics")
		if !strings.Contains(m, `tollgate_list_reloads_total{list="blocked",result="error"} 1`) ||
			!strings.Contains(m, `tollgate_list_reloads_total{list="blocked",result="ok"} 1`) {
			return "metrics: no reload error counted"
		}
		if !strings.Contains(m, `tollgate_decisions_total{class="write",limit="blocked",result="denied_list"}`) {
			return "metrics: no denied_list"
		}
		if !strings.Contains(m, `tollgate_list_entries{list="blocked"} 1`) || !strings.Contains(m, `tollgate_list_entries{list="staff"} 1`) {
			return "metrics: list entries"
		}
		return ""
	})
	if resp, _ := post(t, base+"/v1/check", `{"endpoint":"GET /feed","ip":"192.0.2.9"}`); resp.StatusCode != 403 {
		t.Fatalf("old entries dropped after a bad file: %d", resp.StatusCode)
	}
}
