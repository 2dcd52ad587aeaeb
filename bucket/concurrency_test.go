package bucket_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// lease returns the i-th lease id of a test.
func lease(i int) string { return fmt.Sprintf("%024x", i+1) }

// TestConcurrencyLimit: a concurrency limit admits its capacity in
// flight; a release frees a slot once (an unknown or released lease
// frees nothing), an unreleased lease frees its slot after its TTL, and
// a request another limit denies takes no slot.
func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s, p := sc.new(t)
			ctx := context.Background()
			key := p + "{user:u}:b:exports"
			conc := bucket.Limit{Key: key, Kind: bucket.KindConcurrency, Burst: 2, LeaseTTL: time.Minute}
			var res bucket.Result
			decide := func(at time.Duration, id string, limits ...bucket.Limit) {
				t.Helper()
				req := bucket.Request{Now: t0.Add(at), Cost: 1, Lease: id, Limits: limits}
				if err := s.Decide(ctx, &req, &res); err != nil {
					t.Fatal(err)
				}
			}
			release := func(id string, want bool) {
				t.Helper()
				if got, err := s.Release(ctx, id, []string{key}); err != nil || got != want {
					t.Fatalf("release %s = %v %v, want %v", id, got, err, want)
				}
			}
			decide(0, lease(0), conc)
			if !res.Allowed || res.Limits[0].Remaining != 1 || res.Limits[0].Burst != 2 || !res.Limits[0].Reset.Equal(t0.Add(time.Minute)) {
				t.Fatalf("first: %+v", res)
			}
			decide(10*time.Second, lease(1), conc)
			if !res.Allowed || res.Limits[0].Remaining != 0 || !res.Limits[0].Reset.Equal(t0.Add(time.Minute)) {
				t.Fatalf("second: %+v", res)
			}
			// full: the wait is until the first lease expires at the latest
			decide(20*time.Second, lease(2), conc)
			if res.Allowed || res.Limits[0].RetryAfter != 40*time.Second || res.Limits[0].Remaining != 0 {
				t.Fatalf("third: %+v", res)
			}
			release(lease(0), true)
			release(lease(0), false)
			release(lease(2), false) // denied: it never held a slot
			release(lease(9), false)
			decide(20*time.Second, lease(3), conc)
			if !res.Allowed || res.Limits[0].Remaining != 0 || !res.Limits[0].Reset.Equal(t0.Add(70*time.Second)) {
				t.Fatalf("after release: %+v", res)
			}
			// lease 1 expires at +70s: its slot is free again
			decide(70*time.Second, lease(4), conc)
			if !res.Allowed || res.Limits[0].Remaining != 0 {
				t.Fatalf("after expiry: %+v", res)
			}
			// a cost of 0 asks without taking a slot (as of a bucket: allowed, none left)
			req := bucket.Request{Now: t0.Add(70 * time.Second), Limits: []bucket.Limit{conc}}
			if err := s.Decide(ctx, &req, &res); err != nil || !res.Allowed || res.Limits[0].Remaining != 0 || !res.Limits[0].Reset.Equal(t0.Add(80*time.Second)) {
				t.Fatalf("peek: %+v %v", res, err)
			}
			// all-or-nothing: a bucket that denies leaves the slot free
			release(lease(3), true)
			release(lease(4), true)
			deny := bucket.Limit{Key: p + "{user:u}:b:empty", Burst: 1, Rate: 1, Period: time.Hour}
			decide(71*time.Second, lease(5), conc, deny)
			decide(71*time.Second, lease(6), conc, deny)
			if res.Allowed || !res.Limits[0].Allowed || res.Limits[0].Remaining != 1 {
				t.Fatalf("denied by the bucket: %+v", res)
			}
			release(lease(6), false)
			decide(71*time.Second, lease(7), conc)
			if !res.Allowed || res.Limits[0].Remaining != 0 {
				t.Fatalf("the denied request took a slot: %+v", res)
			}
			// a decision that takes from a concurrency limit needs a lease
			bad := bucket.Request{Now: t0, Cost: 1, Lease: "nope", Limits: []bucket.Limit{conc}}
			if err := s.Decide(ctx, &bad, &res); !errors.Is(err, bucket.ErrBadRequest) {
				t.Fatalf("bad lease: %v", err)
			}
			if _, err := s.Release(ctx, "XYZ", []string{key}); !errors.Is(err, bucket.ErrBadRequest) {
				t.Fatalf("bad release: %v", err)
			}
		})
	}
}

// TestReleaseWrongKey: a lease id naming a key that is not a concurrency
// set (a bucket's) frees nothing and fails nothing.
func TestReleaseWrongKey(t *testing.T) {
	t.Parallel()
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s, p := sc.new(t)
			b := bucket.Request{Now: t0, Cost: 1, Limits: []bucket.Limit{{Key: p + "{ip:1}:b:x", Burst: 3, Rate: 3, Period: time.Minute}}}
			var res bucket.Result
			if err := s.Decide(context.Background(), &b, &res); err != nil {
				t.Fatal(err)
			}
			if ok, err := s.Release(context.Background(), lease(0), []string{p + "{ip:1}:b:x"}); ok || err != nil {
				t.Fatalf("release of a bucket key = %v %v", ok, err)
			}
		})
	}
}

// TestExactConcurrencyLeases: N parallel requests on a concurrency limit
// of capacity C admit exactly C, in each store, and in Redis also through
// two client pools; releasing them admits C more.
func TestExactConcurrencyLeases(t *testing.T) {
	t.Parallel()
	const n, capacity = 400, 57
	run := func(t *testing.T, deciders []bucket.Store, key string) {
		var allowed atomic.Int64
		var wg sync.WaitGroup
		var mu sync.Mutex
		var held []string
		round := func(base int) {
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func(d bucket.Store, id string) {
					defer wg.Done()
					req := bucket.Request{Now: t0, Cost: 1, Lease: id, Limits: []bucket.Limit{
						{Key: key, Kind: bucket.KindConcurrency, Burst: capacity, LeaseTTL: time.Minute},
						{Key: key + "-wide", Burst: 1e6, Rate: 1, Period: time.Hour},
					}}
					var res bucket.Result
					if err := d.Decide(context.Background(), &req, &res); err != nil {
						t.Error(err)
						return
					}
					if res.Allowed {
						allowed.Add(1)
						mu.Lock()
						held = append(held, id)
						mu.Unlock()
					}
				}(deciders[i%len(deciders)], lease(base+i))
			}
			wg.Wait()
		}
		round(0)
		if got := allowed.Load(); got != capacity {
			t.Fatalf("admitted %d of %d, want exactly %d", got, n, capacity)
		}
		for i, id := range held {
			if ok, err := deciders[i%len(deciders)].Release(context.Background(), id, []string{key}); !ok || err != nil {
				t.Fatalf("release %s: %v %v", id, ok, err)
			}
		}
		round(n)
		if got := allowed.Load(); got != 2*capacity {
			t.Fatalf("after the releases: admitted %d, want %d", got-capacity, capacity)
		}
	}
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		run(t, []bucket.Store{bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return t0 }})}, "{user:x}:b:c")
	})
	t.Run("redis-two-pools", func(t *testing.T) {
		t.Parallel()
		c1, p := testenv.Redis(t)
		c2, _ := testenv.Redis(t)
		s1 := bucket.NewRedisStore(c1, bucket.RedisOptions{Timeout: 5 * time.Second, ExpirySlack: 2 * time.Hour, Prefix: p})
		s2 := bucket.NewRedisStore(c2, bucket.RedisOptions{Timeout: 5 * time.Second, ExpirySlack: 2 * time.Hour, Lanes: 2, MaxBatch: 7, Prefix: p})
		defer s1.Close()
		defer s2.Close()
		run(t, []bucket.Store{s1, s2}, p+"{user:x}:b:c")
	})
}

// TestConformanceKinds runs a random sequence of decisions over quotas,
// concurrency limits and buckets together, with multipliers, releases and
// clock moves of up to weeks, against both stores and requires
// bit-identical results (decide.lua's calendar is the Go one).
func TestConformanceKinds(t *testing.T) {
	t.Parallel()
	c, p := testenv.Redis(t)
	mem := bucket.NewMemoryStore(bucket.MemoryOptions{Prefix: p})
	red := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: 5 * time.Second, ExpirySlack: 24 * time.Hour, Prefix: p})
	defer red.Close()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	subs := []bucket.RequestSubject{{Key: bucket.MultiplierKey(p, "user", "k"), Static: 1, Unverified: 1}}
	ckey := p + "{user:k}:b:conc"
	all := []bucket.Limit{
		{Key: p + "{user:k}:b:day", Kind: bucket.KindQuota, Calendar: bucket.Day, Burst: 20, Subjects: 1},
		{Key: p + "{user:k}:b:week", Kind: bucket.KindQuota, Calendar: bucket.Week, Burst: 60},
		{Key: p + "{user:k}:b:month", Kind: bucket.KindQuota, Calendar: bucket.Month, Burst: 150, Subjects: 1},
		{Key: ckey, Kind: bucket.KindConcurrency, Burst: 3, LeaseTTL: 5 * time.Second, Subjects: 1},
		{Key: p + "{user:k}:b:shadow-conc", Kind: bucket.KindConcurrency, Burst: 1, LeaseTTL: time.Second, Shadow: true},
		{Key: p + "{user:k}:b:bucket", Burst: 5, Rate: 1, Period: time.Second},
	}
	values := []float64{0, 0.5, 1, 2}
	now := t0
	var held []string
	var rm, rr bucket.Result
	for i := 0; i < 3000; i++ {
		switch r := rng.IntN(100); {
		case r < 50:
			now = now.Add(time.Duration(rng.IntN(2000)) * time.Millisecond)
		case r < 52:
			now = now.Add(-time.Duration(rng.IntN(3000)) * time.Millisecond)
		case r < 57:
			now = now.Add(time.Duration(rng.IntN(14*24*3600)) * time.Second)
		}
		switch r := rng.IntN(100); {
		case r < 4:
			m := bucket.Multiplier{Source: "admin", Value: values[rng.IntN(len(values))], ExpiresAt: now.Add(time.Duration(1+rng.IntN(60)) * time.Second)}
			for _, s := range []bucket.Store{mem, red} {
				if err := s.SetMultiplier(ctx, bucket.Subject{Kind: "user", ID: "k"}, m); err != nil {
					t.Fatal(err)
				}
			}
			continue
		case r < 15 && len(held) > 0:
			k := rng.IntN(len(held))
			id := held[k]
			held = append(held[:k], held[k+1:]...)
			a, err1 := mem.Release(ctx, id, []string{ckey})
			b, err2 := red.Release(ctx, id, []string{ckey})
			if err1 != nil || err2 != nil || a != b {
				t.Fatalf("op %d: release %s: memory %v %v, redis %v %v", i, id, a, err1, b, err2)
			}
			continue
		}
		req := bucket.Request{Now: now, Cost: float64(rng.IntN(3)), Subjects: subs, Lease: lease(i)}
		for _, l := range all {
			if rng.IntN(3) > 0 {
				req.Limits = append(req.Limits, l)
			}
		}
		if err := mem.Decide(ctx, &req, &rm); err != nil {
			t.Fatal(err)
		}
		if err := red.Decide(ctx, &req, &rr); err != nil {
			t.Fatal(err)
		}
		if d := diff(&rm, &rr); d != "" {
			t.Fatalf("op %d at %v cost %v: stores disagree: %s\nmemory: %+v\nredis:  %+v", i, now.Sub(t0), req.Cost, d, rm, rr)
		}
		if rm.Allowed && req.Cost > 0 {
			held = append(held, req.Lease)
		}
	}
}

// TestClusterKinds: on a real Redis Cluster, a decision over a quota, a
// concurrency limit and a bucket in three slots is all-or-nothing (the
// bucket's denial gives the quota's count and the slot back), and a
// release reaches the lease's set.
func TestClusterKinds(t *testing.T) {
	t.Parallel()
	s := clusterStore(t)
	ctx := context.Background()
	q, c, b := "{account:q1}:b:q", "{user:c1}:b:c", "{ip:9.8.7.6}:b:b"
	if bucket.Slot(q) == bucket.Slot(c) || bucket.Slot(c) == bucket.Slot(b) || bucket.Slot(q) == bucket.Slot(b) {
		t.Fatalf("slots: %d %d %d", bucket.Slot(q), bucket.Slot(c), bucket.Slot(b))
	}
	limits := []bucket.Limit{
		{Key: q, Kind: bucket.KindQuota, Calendar: bucket.Month, Burst: 5},
		{Key: c, Kind: bucket.KindConcurrency, Burst: 2, LeaseTTL: time.Minute},
		{Key: b, Burst: 1, Rate: 1, Period: time.Hour},
	}
	var res bucket.Result
	for i, want := range []struct {
		allowed bool
		q, c    float64
	}{{true, 4, 1}, {false, 4, 1}, {false, 4, 1}} {
		req := bucket.Request{Now: t0, Cost: 1, Lease: lease(i), Limits: limits}
		if err := s.Decide(ctx, &req, &res); err != nil {
			t.Fatal(err)
		}
		if res.Allowed != want.allowed || res.Limits[0].Remaining != want.q || res.Limits[1].Remaining != want.c {
			t.Fatalf("step %d: %+v", i, res)
		}
	}
	// the refunds were real: the quota counted one, one slot is held
	req := bucket.Request{Now: t0, Cost: 1, Lease: lease(5), Limits: limits[:2]}
	if err := s.Decide(ctx, &req, &res); err != nil || !res.Allowed || res.Limits[0].Remaining != 3 || res.Limits[1].Remaining != 0 {
		t.Fatalf("after refunds: %+v %v", res, err)
	}
	for id, want := range map[string]bool{lease(0): true, lease(1): false, lease(5): true} {
		if ok, err := s.Release(ctx, id, []string{q, c}); ok != want || err != nil {
			t.Fatalf("release %s = %v %v, want %v", id, ok, err, want)
		}
	}
}

// TestConcurrencyShorterLeaseTTLKeepsOlderLeases: a lease taken under a
// shorter lease_ttl (a policy reload shortened it) does not shorten the
// life of its set's key below the older leases' expiry: the set would
// vanish with their slots still held, and the limit would admit its
// capacity again beside them. The key lives until its latest lease
// expires (plus the store's slack), and the older lease keeps its slot
// for the TTL it was granted; a longer TTL later lengthens the key.
func TestConcurrencyShorterLeaseTTLKeepsOlderLeases(t *testing.T) {
	t.Parallel()
	c, p := testenv.Redis(t)
	// the limiter's slack (the default, 1s): the key's life is the lease's
	s := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: 5 * time.Second, Prefix: p})
	defer s.Close()
	ctx := context.Background()
	key := p + "{user:u}:b:exports"
	decide := func(id string, ttl time.Duration) {
		t.Helper()
		var res bucket.Result
		req := bucket.Request{Cost: 1, Lease: id, Limits: []bucket.Limit{{Key: key, Kind: bucket.KindConcurrency, Burst: 2, LeaseTTL: ttl}}}
		if err := s.Decide(ctx, &req, &res); err != nil || !res.Allowed {
			t.Fatalf("decide %s (lease_ttl %v): %+v %v", id, ttl, res, err)
		}
	}
	pttl := func() time.Duration {
		t.Helper()
		d, err := c.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	decide(lease(0), time.Hour)
	if d := pttl(); d < time.Hour-time.Minute || d > time.Hour+2*time.Second {
		t.Fatalf("PTTL %v after a lease of 1h, want about 1h and 1s", d)
	}
	decide(lease(1), time.Second) // the policy now says lease_ttl: 1s
	if d := pttl(); d < time.Hour-time.Minute {
		t.Fatalf("PTTL %v after a lease of 1s beside one of 1h: the set vanishes with the older lease's slot held", d)
	}
	if sc, err := c.ZScore(ctx, key, lease(0)).Result(); err != nil {
		t.Fatal(err)
	} else if now, err := c.Time(ctx).Result(); err != nil {
		t.Fatal(err)
	} else if left := time.UnixMicro(int64(sc)).Sub(now); left < time.Hour-time.Minute || left > time.Hour {
		t.Fatalf("the older lease expires in %v, want the hour it was granted", left)
	}
	if ok, err := s.Release(ctx, lease(0), []string{key}); err != nil || !ok {
		t.Fatalf("release of the older lease: %v %v", ok, err)
	}
	decide(lease(2), 2*time.Hour) // lengthened again
	if d := pttl(); d < 2*time.Hour-time.Minute || d > 2*time.Hour+2*time.Second {
		t.Fatalf("PTTL %v after a lease of 2h, want about 2h and 1s", d)
	}
}
