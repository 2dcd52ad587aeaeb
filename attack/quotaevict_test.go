package attack

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tollgate-dev/tollgate/service"
)

// TestAttackRotationRefillsSpentQuota: the one-process default keeps its
// buckets in memory, at most --memory-max-keys of them, and a full shard
// evicts the sampled bucket that is full again earliest. Every key of a
// calendar quota is full again at the same instant, the period's end, so
// among quota keys eviction took whichever it sampled first: a user who
// had spent a monthly quota of 3 exports sent unauthenticated page views
// from fresh addresses (each a new key of the per-address monthly quota)
// until his own quota was evicted, and got 3 more exports (at
// --memory-max-keys 4096, after 8,000 page views). Among keys full again
// together the one that used least goes first now: the fresh addresses'
// keys, each used once, make room for one another, and the spent quota
// stays spent.
func TestAttackRotationRefillsSpentQuota(t *testing.T) {
	t.Parallel()
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte(`version: 1
routes:
  - {match: "GET /export", class: export}
  - {match: "GET *",       class: read}
limits:
  - {name: exports, by: [user], quota: 3/month, if: {class: export}}
  - {name: views,   by: [ip],   quota: 1000/month, if: {class: read}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r, err := service.Start(ctx, service.Config{ConfigPath: pol, Listen: "127.0.0.1:0", MemoryMaxKeys: 4096, NoForwardAuth: true,
		NATSStoreDir: t.TempDir(), AdminToken: adminToken, APIToken: apiToken, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-r.Done })
	base := "http://" + r.Addr
	export := func() int {
		c, _ := do(t, "POST", base+"/v1/check", `{"endpoint":"GET /export","ip":"198.51.100.7","user_id":"mallory"}`, bearer(apiToken))
		return c
	}
	for i := range 3 {
		if c := export(); c != 200 {
			t.Fatalf("export %d of the quota: %d", i+1, c)
		}
	}
	if c := export(); c != 429 {
		t.Fatalf("a 4th export: %d, want 429", c)
	}

	const views, workers = 8000, 8
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < views; i += workers {
				ip := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
				if c, body := do(t, "POST", base+"/v1/check", `{"endpoint":"GET /page","ip":"`+ip+`"}`, bearer(apiToken)); c != 200 {
					t.Errorf("view from %s: %d %s", ip, c, body)
					return
				}
			}
		}()
	}
	wg.Wait()

	got := 0
	for range 3 {
		if export() == 200 {
			got++
		}
	}
	if got != 0 {
		t.Fatalf("after %d page views from fresh addresses, the spent quota gave %d more exports of 3", views, got)
	}
}
