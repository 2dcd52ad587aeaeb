package bucket_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
)

// TestMemoryLeasesBounded: concurrency leases not released live for their
// lease_ttl, so users rotated through a concurrency limit at a high rate
// grew the memory store's lease sets with the rate times the TTL (1M users
// in a second: 1M leases, 365 MB, none counted in MaxKeys). They are
// bounded by MaxLeases now: past it, a decision that
// would add a lease is denied (counted in LeasesRefused), never one
// already held dropped, so a victim at its capacity stays at it; leases
// that expired make room again.
func TestMemoryLeasesBounded(t *testing.T) {
	t.Parallel()
	const maxLeases, users = 64 * 16, 20_000
	s := bucket.NewMemoryStore(bucket.MemoryOptions{MaxLeases: maxLeases, Now: func() time.Time { return t0 }})
	ctx := context.Background()
	p := bucket.DefaultPrefix
	conc := func(user string) bucket.Limit {
		return bucket.Limit{Key: p + "{user:" + user + "}:b:exports", Kind: bucket.KindConcurrency, Burst: 1, LeaseTTL: time.Minute}
	}
	var res bucket.Result
	decide := func(at time.Duration, user string, i int) bool {
		t.Helper()
		req := bucket.Request{Now: t0.Add(at), Cost: 1, Lease: fmt.Sprintf("%024x", i+1), Limits: []bucket.Limit{conc(user)}}
		if err := s.Decide(ctx, &req, &res); err != nil {
			t.Fatal(err)
		}
		return res.Allowed
	}
	if !decide(0, "victim", 0) {
		t.Fatal("the victim's first request was denied")
	}
	admitted := 0
	for i := range users {
		if decide(time.Duration(i)*time.Microsecond, fmt.Sprintf("rot-%d", i), i+1) {
			admitted++
		}
	}
	if n := s.Leases(); n > maxLeases {
		t.Fatalf("%d users rotated within a lease TTL left %d leases held, over the bound of %d", users, n, maxLeases)
	}
	if s.LeasesRefused() == 0 || admitted+int(s.LeasesRefused()) != users {
		t.Fatalf("admitted %d, refused %d of %d", admitted, s.LeasesRefused(), users)
	}
	// the victim's lease was kept: it is still at its capacity
	if decide(time.Second, "victim", users+1) {
		t.Fatal("filling the lease table freed the victim's slot")
	}
	if res.Limits[0].RetryAfter <= 0 {
		t.Fatalf("a refusal without a retry: %+v", res.Limits[0])
	}
	// once the leases expired, new ones are admitted
	if !decide(2*time.Minute, "late", users+2) {
		t.Fatal("no lease admitted after every lease expired")
	}
}
