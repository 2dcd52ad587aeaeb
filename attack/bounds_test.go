package attack

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/service"
)

// metric returns the value of the sample named name (with its labels, if
// any) in a /metrics body, and whether it is there.
func metric(body, name string) (float64, bool) {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, err == nil
}

// TestAttackLeaseRotationBounded: against the one-process limiter on its
// memory store, an attacker rotates 3,000 addresses through a
// concurrency limit (one export each, never released, lease_ttl 1h).
// Every admitted export held a lease for the hour, outside the store's
// --memory-max-keys bound: 3,001 leases. Now they stop at a quarter of it
// (1,024 at --memory-max-keys 4096): past it an export is denied as the
// limit's own 429, counted in tollgate_memory_leases_refused_total, and
// the victim's lease is kept, so it is still at its capacity.
func TestAttackLeaseRotationBounded(t *testing.T) {
	t.Parallel()
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\nlimits:\n  - {name: exports, by: [ip], concurrency: 1, lease_ttl: 1h}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const maxKeys, bound, rotated = 4096, 1024, 3000
	ctx, cancel := context.WithCancel(context.Background())
	r, err := service.Start(ctx, service.Config{ConfigPath: pol, Listen: "127.0.0.1:0", MemoryMaxKeys: maxKeys, NoForwardAuth: true,
		NATSStoreDir: t.TempDir(), AdminToken: adminToken, APIToken: apiToken, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-r.Done })
	base := "http://" + r.Addr
	export := func(ip string) (int, string) {
		t.Helper()
		return do(t, "POST", base+"/v1/check", `{"endpoint":"GET /export","ip":"`+ip+`"}`, bearer(apiToken))
	}
	if c, body := export("198.51.100.7"); c != 200 {
		t.Fatalf("the victim's export: %d %s", c, body)
	}
	admitted, refused := 0, 0
	for i := range rotated {
		switch c, body := export(fmt.Sprintf("10.%d.%d.1", i/250, i%250)); {
		case c == 200:
			admitted++
		case c == 429 && strings.Contains(body, `"kind":"concurrency"`):
			refused++
		default:
			t.Fatalf("export %d: %d %s", i, c, body)
		}
	}
	_, m := do(t, "GET", base+"/metrics", "", bearer(apiToken))
	held, ok := metric(m, "tollgate_memory_leases")
	if !ok || held > bound {
		t.Fatalf("%d addresses rotated left %v leases held (present %v), over the bound of %d", rotated, held, ok, bound)
	}
	if n, _ := metric(m, "tollgate_memory_leases_refused_total"); refused == 0 || int(n) != refused {
		t.Fatalf("admitted %d, refused %d, counted %v", admitted, refused, n)
	}
	if c, body := export("198.51.100.7"); c != 429 {
		t.Fatalf("the victim's second export: %d %s: filling the leases freed its slot", c, body)
	}
	t.Logf("admitted %d, refused %d, leases held %v", admitted, refused, held)
}
