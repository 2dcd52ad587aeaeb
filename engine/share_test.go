package engine

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
)

// TestLocalShareDecisions: a global limit with local_share is served
// from shares, so most decisions reach the store with the per-user
// limit alone, and the global limit admits exactly its capacity.
func TestLocalShareDecisions(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	p, err := policy.Parse("p.yaml", []byte(`version: 1
limits:
  - {name: all,  by: [global], rate: 1000/s, local_share: 10ms}
  - {name: user, by: [user],   rate: 1000/s}
`))
	if err != nil {
		t.Fatal(err)
	}
	store := &countingStore{Store: bucket.NewMemoryStore(bucket.MemoryOptions{Now: clock})} // not a bare memory store: shares apply
	e, err := New(Options{Store: store, Policy: func() *policy.Policy { return p }, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	shares := e.dec.(*bucket.Shares)
	admitted, globalOnly := 0, 0
	var d Decision
	for i := 0; i < 1500; i++ {
		in := Input{IP: "198.51.100.7", UserID: "u" + string(rune('a'+i%20)), Cost: 1}
		if err := e.Decide(context.Background(), &in, &d); err != nil {
			t.Fatal(err)
		}
		shares.Wait()
		if d.Outcome == Allowed {
			admitted++
		}
		if d.Outcome == Limited && d.Binding.Name == "all" {
			globalOnly++
		}
	}
	if admitted != 1000 || globalOnly != 500 {
		t.Fatalf("admitted %d (want the global capacity, 1000), refused by the global limit %d (want 500)", admitted, globalOnly)
	}
	// every decision reaches the store (the user limit is exact), and the
	// refills are about one per 10 tokens
	if got := store.calls.Load(); got > 1500+150 {
		t.Fatalf("%d store decisions for 1500 requests", got)
	}
}
