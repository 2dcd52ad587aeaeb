package engine

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
)

const ownPolicy = `version: 1
routes:
  - {match: "POST /auth/login", class: auth}
limits:
  - {name: login-account, by: [account, route], rate: 5/min, if: {class: auth}, trusted_devices: own}
`

// TestTrustedDevicesOwn (7.1): with `trusted_devices: own`, a proven
// device in the account's trust set takes from a bucket of its own (the
// limit's key plus the device); a request naming the same device id
// without its token, or a proven device not trusted by this account,
// shares the limit's bucket. With and without the L1 cache, which never
// answers a limit with an own bucket from a cached denial.
func TestTrustedDevicesOwn(t *testing.T) {
	t.Parallel()
	for _, withL1 := range []bool{false, true} {
		now := time.Unix(1700000000, 0)
		mem := bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return now }})
		p, err := policy.Parse("p.yaml", []byte(ownPolicy))
		if err != nil {
			t.Fatal(err)
		}
		o := Options{Store: mem, Policy: func() *policy.Policy { return p }, Clock: func() time.Time { return now }}
		if withL1 {
			o.L1 = NewL1(L1Options{TTL: time.Minute})
		}
		e, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		_ = mem.Trust(ctx, bucket.Subject{Kind: "account", ID: "alice"}, "phone", now.Add(time.Hour))
		_ = mem.Trust(ctx, bucket.Subject{Kind: "account", ID: "bob"}, "tablet", now.Add(time.Hour))
		decide := func(device string, proven bool) Outcome {
			in := Input{Endpoint: "POST /auth/login", IP: "192.0.2.1", Account: "alice", DeviceID: device, DeviceVerified: proven, Cost: 1}
			var d Decision
			if err := e.Decide(ctx, &in, &d); err != nil {
				t.Fatal(err)
			}
			return d.Outcome
		}
		for i, c := range []struct {
			device string
			proven bool
		}{{"", false}, {"phone", false}, {"tablet", true}, {"x", false}, {"phone", false}} {
			if got := decide(c.device, c.proven); got != Allowed {
				t.Fatalf("l1 %v: shared request %d (%+v): %v", withL1, i, c, got)
			}
		}
		for _, c := range []struct {
			device string
			proven bool
		}{{"", false}, {"phone", false}, {"tablet", true}} {
			if got := decide(c.device, c.proven); got != Limited {
				t.Fatalf("l1 %v: the shared budget is spent, yet %+v got %v", withL1, c, got)
			}
		}
		for i := 0; i < 5; i++ {
			if got := decide("phone", true); got != Allowed {
				t.Fatalf("l1 %v: trusted phone %d: %v", withL1, i, got)
			}
		}
		if got := decide("phone", true); got != Limited {
			t.Fatalf("l1 %v: the trusted phone past its own budget: %v", withL1, got)
		}
	}
}
