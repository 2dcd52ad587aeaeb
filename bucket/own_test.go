package bucket_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
)

// TestTrustedDevicesOwn: a limit with an OwnKey (trusted_devices: own,
// 7.1) takes a trusted device's tokens from the device's own bucket and
// everyone else's from the shared one, with the same numbers in every
// store (the memory store, the Lua script, the Cluster path). An attacker
// who drains the shared bucket leaves the trusted device's budget whole,
// and the trusted device's own attempts stay bounded by the limit.
func TestTrustedDevicesOwn(t *testing.T) {
	t.Parallel()
	cases := append(stores(), storeCase{"cluster", func(t *testing.T) (bucket.Store, string) {
		return clusterStore(t), bucket.DefaultPrefix
	}})
	for _, sc := range cases {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s, p := sc.new(t)
			ctx := context.Background()
			alice := bucket.Subject{Kind: "account", ID: "alice"}
			if err := s.Trust(ctx, alice, "phone", t0.Add(30*24*time.Hour)); err != nil {
				t.Fatal(err)
			}
			trust := bucket.TrustKey(p, "account", "alice")
			shared := p + "{account:alice}:b:login-account|POST /auth/login"
			ipKey := p + "{ip:192.0.2.1}:b:login-ip|POST /auth/login"
			req := func(device string) bucket.Request {
				r := bucket.Request{Cost: 1, Device: device, OwnTrust: trust, Limits: []bucket.Limit{
					{Key: ipKey, Burst: 100, Rate: 100, Period: time.Minute},
					{Key: shared, Burst: 5, Rate: 5, Period: time.Minute},
				}}
				if device != "" {
					r.Limits[1].OwnKey = shared + "|~" + device
				}
				return r
			}
			var res bucket.Result
			decide := func(r bucket.Request, at time.Duration) {
				t.Helper()
				r.Now = t0.Add(at)
				if err := s.Decide(ctx, &r, &res); err != nil {
					t.Fatal(err)
				}
			}
			// the attacker (no device, then a device that is not trusted)
			// drains the shared bucket
			for i := 0; i < 5; i++ {
				decide(req([]string{"", "evil"}[i%2]), 0)
				if !res.Allowed || res.Trusted || res.Limits[1].Remaining != float64(4-i) {
					t.Fatalf("attacker %d: %+v", i, res)
				}
			}
			decide(req("evil"), 0)
			if res.Allowed || res.Trusted || res.Limits[1].RetryAfter != 12*time.Second {
				t.Fatalf("attacker past the budget: %+v", res)
			}
			// the trusted phone has its own five, at the limit's rate
			for i := 0; i < 5; i++ {
				decide(req("phone"), 0)
				if !res.Allowed || !res.Trusted || res.Limits[1].Remaining != float64(4-i) || res.Limits[1].Burst != 5 {
					t.Fatalf("phone %d: %+v", i, res)
				}
			}
			decide(req("phone"), 0)
			if res.Allowed || !res.Trusted || res.Limits[1].RetryAfter != 12*time.Second {
				t.Fatalf("phone past its own budget: %+v", res)
			}
			// the limits without an own key are shared by the phone too
			if res.Limits[0].Remaining != 90 {
				t.Fatalf("ip bucket: %+v", res.Limits[0])
			}
			// the phone took nothing from the shared bucket: at +12s it
			// holds exactly one token again
			decide(req(""), 12*time.Second)
			if !res.Allowed || res.Limits[1].Remaining != 0 {
				t.Fatalf("shared after the phone: %+v", res)
			}
			decide(req(""), 12*time.Second)
			if res.Allowed {
				t.Fatalf("shared bucket refilled beyond its rate: %+v", res)
			}
		})
	}
}

// TestTrustedDevicesOwnConcurrent: concurrent decisions (batched by the
// Redis lanes into one script) of a trusted device and of others admit
// exactly each bucket's capacity.
func TestTrustedDevicesOwnConcurrent(t *testing.T) {
	t.Parallel()
	for _, sc := range stores() {
		if sc.name == "memory-unshared" {
			continue // one goroutine at a time by definition
		}
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s, p := sc.new(t)
			ctx := context.Background()
			if err := s.Trust(ctx, bucket.Subject{Kind: "account", ID: "bob"}, "phone", t0.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			shared := p + "{account:bob}:b:login-account"
			var phone, others atomic.Int32
			var wg sync.WaitGroup
			for g := 0; g < 40; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					dev := []string{"phone", "evil"}[g%2]
					r := bucket.Request{Now: t0, Cost: 1, Device: dev, OwnTrust: bucket.TrustKey(p, "account", "bob"),
						Limits: []bucket.Limit{{Key: shared, OwnKey: shared + "|~" + dev, Burst: 7, Rate: 7, Period: time.Minute}}}
					var res bucket.Result
					if err := s.Decide(ctx, &r, &res); err != nil {
						t.Error(err)
						return
					}
					switch {
					case res.Allowed && dev == "phone":
						phone.Add(1)
					case res.Allowed:
						others.Add(1)
					}
				}()
			}
			wg.Wait()
			if phone.Load() != 7 || others.Load() != 7 {
				t.Fatalf("admitted %d for the phone and %d for the others, want 7 and 7", phone.Load(), others.Load())
			}
		})
	}
}

// TestTrustedDevicesOwnWithLease: a decision with an own bucket and a
// concurrency limit adds the lease it was given (the own section follows
// the lease in decide.lua's numbers) and reports the trust; an own key on
// a limit that is no token bucket is refused (its lease could not be
// released from the shared key).
func TestTrustedDevicesOwnWithLease(t *testing.T) {
	t.Parallel()
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s, p := sc.new(t)
			ctx := context.Background()
			if err := s.Trust(ctx, bucket.Subject{Kind: "account", ID: "carol"}, "phone", t0.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			shared := p + "{account:carol}:b:login"
			conc := p + "{account:carol}:b:exports"
			req := bucket.Request{Now: t0, Cost: 1, Device: "phone", OwnTrust: bucket.TrustKey(p, "account", "carol"), Lease: lease(7),
				Limits: []bucket.Limit{
					{Key: shared, OwnKey: shared + "|~phone", Burst: 3, Rate: 3, Period: time.Minute},
					{Key: conc, Kind: bucket.KindConcurrency, Burst: 1, LeaseTTL: time.Minute},
				}}
			var res bucket.Result
			if err := s.Decide(ctx, &req, &res); err != nil {
				t.Fatal(err)
			}
			if !res.Allowed || !res.Trusted || res.Limits[0].Remaining != 2 || res.Limits[1].Remaining != 0 {
				t.Fatalf("decision: %+v", res)
			}
			if ok, err := s.Release(ctx, lease(7), []string{conc}); err != nil || !ok {
				t.Fatalf("release of the decision's lease: %v %v", ok, err)
			}
			req.Limits[1].OwnKey = conc + "|~phone"
			if err := s.Decide(ctx, &req, &res); !errors.Is(err, bucket.ErrBadRequest) {
				t.Fatalf("own key on a concurrency limit: %v, want ErrBadRequest", err)
			}
		})
	}
}
