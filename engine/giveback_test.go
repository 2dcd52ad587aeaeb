package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
)

// lostAnswers is a store whose decisions run but whose answers are lost
// while lose is set (a timeout after the script reached Redis), and that
// fails decisions without running them while unsent is set (a refused
// connection).
type lostAnswers struct {
	*bucket.MemoryStore
	lose, unsent bool
	releases     atomic.Int32 // Release calls
}

func (s *lostAnswers) Release(ctx context.Context, lease string, keys []string) (bool, error) {
	s.releases.Add(1)
	return s.MemoryStore.Release(ctx, lease, keys)
}

func (s *lostAnswers) Decide(ctx context.Context, req *bucket.Request, res *bucket.Result) error {
	if s.unsent {
		return errors.Join(bucket.ErrUnavailable, errors.New("test: refused"))
	}
	err := s.MemoryStore.Decide(ctx, req, res)
	if s.lose {
		return errors.Join(bucket.ErrUnavailable, bucket.ErrUnanswered, errors.New("test: answer lost"))
	}
	return err
}

// TestGiveBackLostLeases: a decision of a concurrency limit whose answer
// is lost after the store took its slot is answered by the failure mode,
// without a lease id, and the engine gives the slot back itself
// (tollgate_lease_releases_total{result="given_back"}), so the key's
// capacity is whole again; decisions that fail before any store call
// give nothing back.
func TestGiveBackLostLeases(t *testing.T) {
	t.Parallel()
	now := time.Now().Truncate(time.Microsecond)
	clock := func() time.Time { return now }
	store := &lostAnswers{MemoryStore: bucket.NewMemoryStore(bucket.MemoryOptions{Now: clock})}
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
	store.lose = true
	for i := 0; i < 2; i++ {
		if err := e.Decide(ctx, &in, &d); err != nil {
			t.Fatal(err)
		}
		if d.Outcome != Degraded || d.LeaseID() != "" {
			t.Fatalf("lost answer %d: %v lease %q, want degraded without a lease", i, d.Outcome, d.LeaseID())
		}
	}
	store.lose = false
	testenv.Eventually(t, 5*time.Second, func() string {
		if n := store.Leases(); n != 0 {
			return fmt.Sprintf("%d leases still held", n)
		}
		if got := testutil.ToFloat64(m.Releases.WithLabelValues(ReleaseGivenBack)); got != 2 || len(e.giveBacks) != 0 {
			return fmt.Sprintf("given back %v, want 2; %d give-backs under way", got, len(e.giveBacks))
		}
		return ""
	})
	if n := store.releases.Load(); n != 2 {
		t.Fatalf("2 leases given back in %d releases, want 2", n)
	}
	// a decision that never reached the store has nothing to give back
	store.unsent = true
	if err := e.Decide(ctx, &in, &d); err != nil || d.Outcome != Degraded {
		t.Fatalf("unsent: %v %v", d.Outcome, err)
	}
	store.unsent = false
	if n := store.releases.Load(); n != 2 || len(e.giveBacks) != 0 {
		t.Fatalf("an unsent decision gave back: %d releases, %d under way", n, len(e.giveBacks))
	}
	for i := 0; i < 3; i++ {
		if err := e.Decide(ctx, &in, &d); err != nil {
			t.Fatal(err)
		}
		if want := i < 2; (d.Outcome == Allowed) != want {
			t.Fatalf("export %d after the lost answers: %v, want allowed %v", i, d.Outcome, want)
		}
	}
}
