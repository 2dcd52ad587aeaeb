package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
)

const kindsPolicy = `version: 1
limits:
  - {name: sms-month, by: [account], quota: 3/month, if: {attr: {plan: [free]}}}
  - {name: exports, by: [user], concurrency: 2, lease_ttl: 30s}
  - {name: wide, by: [ip], rate: 1000/min}
`

// TestQuotaDecision: a quota binds with the next month's start as its
// reset and the current month's length as its window, and denies when
// the month is spent; it applies only where its condition holds.
func TestQuotaDecision(t *testing.T) {
	t.Parallel()
	now := time.Date(2027, 2, 27, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	p, err := policy.Parse("p.yaml", []byte(kindsPolicy))
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Options{Store: bucket.NewMemoryStore(bucket.MemoryOptions{Now: clock}), Policy: func() *policy.Policy { return p }, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	in := Input{IP: "198.51.100.7", Account: "a1", Attributes: map[string]string{"plan": "free"}, Cost: 1}
	var d Decision
	for i := 0; i < 3; i++ {
		if err := e.Decide(context.Background(), &in, &d); err != nil {
			t.Fatal(err)
		}
	}
	if d.Outcome != Allowed || d.Binding.Name != "sms-month" || d.Remaining != 0 || d.Limit != 3 ||
		!d.Reset.Equal(time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)) || d.Window != 28*24*time.Hour || d.LeaseID() != "" {
		t.Fatalf("third: %+v", d)
	}
	if err := e.Decide(context.Background(), &in, &d); err != nil {
		t.Fatal(err)
	}
	if d.Outcome != Limited || d.Binding.Kind != policy.KindQuota || d.RetryAfter != 36*time.Hour {
		t.Fatalf("fourth: %+v", d)
	}
	// a paid plan: the quota does not apply
	in.Attributes = map[string]string{"plan": "pro"}
	if err := e.Decide(context.Background(), &in, &d); err != nil || d.Outcome != Allowed || d.Binding.Name != "wide" {
		t.Fatalf("pro: %+v %v", d, err)
	}
}

// TestConcurrencyDecision: admitted requests of a concurrency limit get a
// lease id, the third in flight is denied by kind concurrency, a release
// frees its slot exactly once, and the metrics count both.
func TestConcurrencyDecision(t *testing.T) {
	t.Parallel()
	now := time.Now().Truncate(time.Microsecond)
	clock := func() time.Time { return now }
	store := bucket.NewMemoryStore(bucket.MemoryOptions{Now: clock})
	p, err := policy.Parse("p.yaml", []byte(kindsPolicy))
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(prometheus.NewRegistry())
	e, err := New(Options{Store: store, Policy: func() *policy.Policy { return p }, Metrics: m, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in := Input{IP: "198.51.100.7", UserID: "u1", Cost: 1}
	var d Decision
	var ids []string
	for i := 0; i < 3; i++ {
		if err := e.Decide(ctx, &in, &d); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.LeaseID())
	}
	if d.Outcome != Limited || d.Binding.Name != "exports" || d.Binding.Kind != policy.KindConcurrency || ids[2] != "" || d.RetryAfter != 30*time.Second {
		t.Fatalf("third in flight: %+v", d)
	}
	if ids[0] == "" || ids[1] == "" || ids[0] == ids[1] {
		t.Fatalf("lease ids %q", ids)
	}
	if ok, err := e.Release(ctx, ids[0]); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	if ok, err := e.Release(ctx, ids[0]); ok || err != nil {
		t.Fatalf("second release: %v %v", ok, err)
	}
	if err := e.Decide(ctx, &in, &d); err != nil || d.Outcome != Allowed || d.LeaseID() == "" || d.Window != 30*time.Second {
		t.Fatalf("after release: %+v %v", d, err)
	}
	for _, bad := range []string{"", "x", ids[1][:24], ids[1][:24] + ".!!", "ABCDEF" + ids[1][6:], ids[1] + "\n", ids[1][:30] + "\r" + ids[1][30:]} {
		if _, err := e.Release(ctx, bad); !errors.Is(err, ErrBadLeaseID) {
			t.Errorf("release %q: %v, want ErrBadLeaseID", bad, err)
		}
	}
	if got := testutil.ToFloat64(m.Leases.WithLabelValues("exports")); got != 3 {
		t.Errorf("leases acquired %v, want 3", got)
	}
	if r, n := testutil.ToFloat64(m.Releases.WithLabelValues(ReleaseReleased)), testutil.ToFloat64(m.Releases.WithLabelValues(ReleaseNotFound)); r != 1 || n != 1 {
		t.Errorf("releases: released %v not_found %v", r, n)
	}
	// a lease expires: after its TTL the slot is free without a release
	now = now.Add(31 * time.Second)
	for i := 0; i < 2; i++ {
		if err := e.Decide(ctx, &in, &d); err != nil || d.Outcome != Allowed {
			t.Fatalf("after expiry %d: %+v %v", i, d, err)
		}
	}
}

// TestConcurrencyKeysOutliveTheDecision: the memory store keeps a
// concurrency limit's key in its lease table past Decide, so it must not
// keep the key the engine lent it (the Decision's reused key buffer): a
// later decision rewrote the kept key's bytes in place, and a fresh
// address could find another's lease under its own key and be denied
// (about one in a few hundred in the one-process default).
func TestConcurrencyKeysOutliveTheDecision(t *testing.T) {
	t.Parallel()
	p, err := policy.Parse("p.yaml", []byte("version: 1\nlimits:\n  - {name: exports, by: [ip], concurrency: 1, lease_ttl: 1h}\n"))
	if err != nil {
		t.Fatal(err)
	}
	store := bucket.NewMemoryStore(bucket.MemoryOptions{MaxLeases: 1 << 20})
	e, err := New(Options{Store: store, Policy: func() *policy.Policy { return p }})
	if err != nil {
		t.Fatal(err)
	}
	var d Decision // one key buffer for every decision, as the pool gives
	denied := 0
	for i := range 5000 {
		in := Input{Endpoint: "GET /export", IP: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), Cost: 1}
		if err := e.Decide(context.Background(), &in, &d); err != nil {
			t.Fatal(err)
		}
		if d.Outcome != Allowed {
			denied++
		}
	}
	if denied != 0 || store.Leases() != 5000 {
		t.Fatalf("5,000 addresses' first exports: %d denied, %d leases held; want none denied, 5,000 held", denied, store.Leases())
	}
}
