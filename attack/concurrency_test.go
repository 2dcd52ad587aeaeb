package attack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/service"
)

// TestAttackLeaseTTLReloadKeepsHeldSlots: an attacker holds a slot of a
// concurrency limit (an export it never releases, lease_ttl 1h). The
// operator reloads the policy with a shorter lease_ttl (1s), and the
// attacker takes the next slot under it. That short lease must not cut
// the life of the whole set of leases: once it has expired, the older
// slot is still held, so the limit admits one more export, not two (three
// in flight under a cap of 2). Before, the short lease's PEXPIRE set the
// set's key to vanish 1s (+1s slack) later, with the 1h lease in it.
func TestAttackLeaseTTLReloadKeepsHeldSlots(t *testing.T) {
	t.Parallel()
	pol := filepath.Join(t.TempDir(), "concurrency-policy.yaml")
	write := func(ttl string) {
		t.Helper()
		body := "version: 1\nlimits:\n  - {name: exports, by: [ip], concurrency: 2, lease_ttl: " + ttl + "}\n"
		// written whole, then renamed: the watcher never reads half a file
		if err := os.WriteFile(pol+".new", []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(pol+".new", pol); err != nil {
			t.Fatal(err)
		}
	}
	write("1h")
	tg := start(t, func(c *service.Config) {
		c.ConfigPath, c.NoForwardAuth, c.WatchInterval = pol, true, 20*time.Millisecond
	})
	export := func(want int) {
		t.Helper()
		code, body := do(t, "POST", tg.api+"/v1/check", `{"endpoint":"GET /export","ip":"198.51.100.7"}`, bearer(apiToken))
		if code != want || want == 429 && !strings.Contains(body, `"kind":"concurrency"`) {
			t.Fatalf("export: %d %s, want %d", code, body, want)
		}
	}
	export(200) // held for the hour it was granted, never released

	write("1s")
	eventually(t, 10*time.Second, func() string {
		if _, m := do(t, "GET", tg.api+"/metrics", "", nil); !strings.Contains(m, `tollgate_policy_reloads_total{result="ok"} 1`) {
			return "reload not counted"
		}
		return ""
	})
	export(200) // the second slot, for 1s
	export(429)
	// Redis's clock decides when the short lease, and before the fix the
	// whole set, expired: wait past both (1s lease, 1s slack)
	taken, err := tg.rdb.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() string {
		if now, err := tg.rdb.Time(t.Context()).Result(); err != nil || now.Before(taken.Add(2500*time.Millisecond)) {
			return "the short lease's key life has not passed yet"
		}
		return ""
	})
	export(200) // the short lease's slot, free again
	export(429) // the hour's lease still holds the other
}
