package bucket_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// t0 is the injected start of every scripted timeline: an hour ahead of the
// wall clock, so Redis's own expiry (wall time) never runs ahead of it.
var t0 = time.Now().Add(time.Hour).Truncate(time.Second)

type storeCase struct {
	name string
	new  func(t *testing.T) (bucket.Store, string)
}

// stores returns the two implementations under test (the memory store
// also unshared: no locks, one goroutine); each test gets a fresh store
// and a key prefix of its own.
func stores() []storeCase {
	return []storeCase{
		{"memory", func(t *testing.T) (bucket.Store, string) {
			return bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return t0 }, Prefix: "m:"}), "m:"
		}},
		{"memory-unshared", func(t *testing.T) (bucket.Store, string) {
			return bucket.NewSingleGoroutineMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return t0 }, Prefix: "m:"}), "m:"
		}},
		{"redis", func(t *testing.T) (bucket.Store, string) {
			c, prefix := testenv.Redis(t)
			s := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: 5 * time.Second, ExpirySlack: 2 * time.Hour, Prefix: prefix})
			t.Cleanup(func() { s.Close() })
			return s, prefix
		}},
	}
}

// step is one decision of a scripted timeline with its exact expectations.
type step struct {
	at        time.Duration // since t0
	cost      float64
	allowed   bool
	remaining []float64 // per limit
	retry     []time.Duration
	reset     []time.Duration // since t0
}

func runSteps(t *testing.T, s bucket.Store, req bucket.Request, steps []step) {
	t.Helper()
	var res bucket.Result
	for i, st := range steps {
		req.Now = t0.Add(st.at)
		req.Cost = st.cost
		if err := s.Decide(context.Background(), &req, &res); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if res.Allowed != st.allowed {
			t.Fatalf("step %d at %v: allowed = %v, want %v", i, st.at, res.Allowed, st.allowed)
		}
		for j, want := range st.remaining {
			if got := res.Limits[j].Remaining; math.Abs(got-want) > 1e-9 {
				t.Errorf("step %d limit %d: remaining = %v, want %v", i, j, got, want)
			}
		}
		for j, want := range st.retry {
			if got := res.Limits[j].RetryAfter; got != want {
				t.Errorf("step %d limit %d: retry = %v, want %v", i, j, got, want)
			}
		}
		for j, want := range st.reset {
			if got := res.Limits[j].Reset.Sub(t0); got != want {
				t.Errorf("step %d limit %d: reset = t0+%v, want t0+%v", i, j, got, want)
			}
		}
	}
}

func TestSingleBucket(t *testing.T) {
	t.Parallel()
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s, p := sc.new(t)
			req := bucket.Request{Limits: []bucket.Limit{{Key: p + "{ip:1}:b:x", Burst: 10, Rate: 10, Period: time.Minute}}}
			var steps []step
			for i := 0; i < 10; i++ {
				steps = append(steps, step{cost: 1, allowed: true, remaining: []float64{float64(9 - i)},
					reset: []time.Duration{time.Duration(i+1) * 6 * time.Second}})
			}
			steps = append(steps,
				step{cost: 1, allowed: false, remaining: []float64{0}, retry: []time.Duration{6 * time.Second}, reset: []time.Duration{60 * time.Second}},
				step{at: 3 * time.Second, cost: 1, allowed: false, remaining: []float64{0.5}, retry: []time.Duration{3 * time.Second}},
				step{at: 6 * time.Second, cost: 1, allowed: true, remaining: []float64{0}, retry: []time.Duration{0}, reset: []time.Duration{66 * time.Second}},
				step{at: 6 * time.Second, cost: 0, allowed: true, remaining: []float64{0}},
				// the clock steps back: no refill, no error
				step{at: 2 * time.Second, cost: 1, allowed: false, remaining: []float64{0}, retry: []time.Duration{6 * time.Second}},
				step{at: 18 * time.Second, cost: 2, allowed: true, remaining: []float64{0}},
				// cost above the burst can never pass
				step{at: 10 * time.Minute, cost: 11, allowed: false, remaining: []float64{10}, retry: []time.Duration{time.Hour}},
				step{at: 10 * time.Minute, cost: 10, allowed: true, remaining: []float64{0}},
			)
			runSteps(t, s, req, steps)
		})
	}
}

func TestAllOrNothing(t *testing.T) {
	t.Parallel()
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s, p := sc.new(t)
			req := bucket.Request{Limits: []bucket.Limit{
				{Key: p + "{ip:1}:b:a", Burst: 5, Rate: 5, Period: time.Minute},
				{Key: p + "{user:1}:b:b", Burst: 2, Rate: 2, Period: time.Hour},
				{Key: p + "{device:1}:b:shadow", Burst: 1, Rate: 1, Period: time.Hour, Shadow: true},
			}}
			runSteps(t, s, req, []step{
				{cost: 1, allowed: true, remaining: []float64{4, 1, 0}},
				// the shadow limit is out but never denies; it takes nothing
				{cost: 1, allowed: true, remaining: []float64{3, 0, 0}},
				// b denies: a keeps its 3 tokens, nobody pays
				{cost: 1, allowed: false, remaining: []float64{3, 0, 0}, retry: []time.Duration{0, 30 * time.Minute, time.Hour}},
				{cost: 1, allowed: false, remaining: []float64{3, 0, 0}},
			})
		})
	}
}

func TestMultipliers(t *testing.T) {
	t.Parallel()
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s, p := sc.new(t)
			ctx := context.Background()
			devS, ipS := bucket.Subject{Kind: "device", ID: "d1"}, bucket.Subject{Kind: "ip", ID: "1.2.3.4"}
			dev := bucket.MultiplierKey(p, "device", "d1")
			ip := bucket.MultiplierKey(p, "ip", "1.2.3.4")
			req := bucket.Request{
				Subjects: []bucket.RequestSubject{{Key: dev, Static: 1, Unverified: 1}, {Key: ip, Static: 1, Unverified: 1}},
				Limits: []bucket.Limit{
					{Key: p + "{device:d1}:b:dev", Burst: 10, Rate: 10, Period: time.Minute, Subjects: 1},
					{Key: p + "{ip:1.2.3.4}:b:ip", Burst: 100, Rate: 100, Period: time.Minute, Subjects: 2},
				},
			}
			var res bucket.Result
			decide := func(at time.Duration) {
				t.Helper()
				req.Now, req.Cost = t0.Add(at), 0
				if err := s.Decide(ctx, &req, &res); err != nil {
					t.Fatal(err)
				}
			}
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			// a bonus alone applies
			must(s.SetMultiplier(ctx, devS, bucket.Multiplier{Source: "velocity", Value: 2, ExpiresAt: t0.Add(time.Hour)}))
			decide(0)
			if res.Limits[0].Burst != 20 || res.Limits[0].Multiplier != 2 || res.Limits[1].Burst != 100 {
				t.Fatalf("bonus: %+v", res.Limits)
			}
			// penalties win over bonuses
			must(s.SetMultiplier(ctx, devS, bucket.Multiplier{Source: "anomaly", Value: 0.5, ExpiresAt: t0.Add(10 * time.Minute)}))
			must(s.SetMultiplier(ctx, devS, bucket.Multiplier{Source: "admin", Value: 0.8, ExpiresAt: t0.Add(20 * time.Minute)}))
			decide(0)
			if res.Limits[0].Burst != 5 {
				t.Fatalf("penalty: burst %v, want 5", res.Limits[0].Burst)
			}
			// expiry per source: at +10m the anomaly is gone, admin 0.8 remains
			decide(10 * time.Minute)
			if res.Limits[0].Burst != 8 {
				t.Fatalf("after anomaly expiry: burst %v, want 8", res.Limits[0].Burst)
			}
			// 0 blocks, and the wait is the block's remaining time
			must(s.SetMultiplier(ctx, ipS, bucket.Multiplier{Source: "admin", Value: 0, ExpiresAt: t0.Add(15 * time.Minute)}))
			req.Now, req.Cost = t0.Add(10*time.Minute), 1
			must(s.Decide(ctx, &req, &res))
			if res.Allowed || res.Limits[1].Allowed || res.Limits[1].RetryAfter != 5*time.Minute || !res.Limits[0].Allowed {
				t.Fatalf("blocked: %+v", res)
			}
			must(s.ClearMultiplier(ctx, ipS, "admin"))
			must(s.Decide(ctx, &req, &res))
			if !res.Allowed {
				t.Fatalf("after clear: %+v", res)
			}
			ms, err := s.Multipliers(ctx, devS)
			must(err)
			if len(ms) != 3 || ms[0].Source != "admin" || ms[1].Source != "anomaly" || ms[2].Source != "velocity" || ms[0].Value != 0.8 {
				t.Fatalf("multipliers: %+v", ms)
			}
			// a static multiplier (reputation) combines by the same rule
			req.Subjects[1].Static = 0.25
			req.Cost = 0
			must(s.Decide(ctx, &req, &res))
			if res.Limits[1].Burst != 25 {
				t.Fatalf("static: burst %v, want 25", res.Limits[1].Burst)
			}
			// a subject the caller's cache knows is not read: its cached value rules
			req.Subjects[1] = bucket.RequestSubject{Key: ip, Static: 1, Unverified: 1, Cached: true, Mult: 0.5}
			must(s.Decide(ctx, &req, &res))
			if res.Limits[1].Burst != 50 || res.Subjects[1].Read || !res.Subjects[0].Read || res.Subjects[0].Mult != 0.8 {
				t.Fatalf("cached subject: burst %v, subjects %+v", res.Limits[1].Burst, res.Subjects)
			}
			// unverified applies whatever is stored: a stored "attestation"
			// multiplier (first edition) is ignored (6.3)
			unvS := bucket.Subject{Kind: "device", ID: "fresh"}
			unv := bucket.MultiplierKey(p, "device", "fresh")
			req = bucket.Request{Now: t0, Subjects: []bucket.RequestSubject{{Key: unv, Static: 1, Unverified: 0.5}},
				Limits: []bucket.Limit{{Key: p + "{device:fresh}:b:dev", Burst: 10, Rate: 10, Period: time.Minute, Subjects: 1}}}
			must(s.Decide(ctx, &req, &res))
			if res.Limits[0].Burst != 5 {
				t.Fatalf("unverified: burst %v, want 5", res.Limits[0].Burst)
			}
			must(s.SetMultiplier(ctx, unvS, bucket.Multiplier{Source: "attestation", Value: 2, ExpiresAt: t0.Add(time.Hour)}))
			must(s.Decide(ctx, &req, &res))
			if res.Limits[0].Burst != 5 {
				t.Fatalf("stored attestation: burst %v, want 5 (ignored)", res.Limits[0].Burst)
			}
		})
	}
}

func TestLocks(t *testing.T) {
	t.Parallel()
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s, p := sc.new(t)
			ctx := context.Background()
			alice := bucket.Subject{Kind: "account", ID: "alice"}
			lk := bucket.LockKey(p, "account", "alice")
			req := bucket.Request{Cost: 1, Locks: []string{lk}, Limits: []bucket.Limit{{Key: p + "{account:alice}:b:l", Burst: 3, Rate: 3, Period: time.Minute}}}
			var res bucket.Result
			until := t0.Add(15 * time.Minute)
			if err := s.SetLock(ctx, alice, bucket.Lock{Kind: "lockout", Rule: "account-failures", Until: until}); err != nil {
				t.Fatal(err)
			}
			req.Now = t0
			if err := s.Decide(ctx, &req, &res); err != nil {
				t.Fatal(err)
			}
			if !res.Locked || res.Allowed || res.Lock.Kind != "lockout" || res.Lock.Rule != "account-failures" || !res.Lock.Until.Equal(until) {
				t.Fatalf("locked: %+v", res)
			}
			l, ok, err := s.GetLock(ctx, alice)
			if err != nil || !ok || l.Kind != "lockout" {
				t.Fatalf("GetLock = %+v %v %v", l, ok, err)
			}
			if ok, err := s.ClearLock(ctx, alice); err != nil || !ok {
				t.Fatalf("ClearLock = %v %v", ok, err)
			}
			if err := s.Decide(ctx, &req, &res); err != nil || !res.Allowed || res.Limits[0].Remaining != 2 {
				t.Fatalf("after clear: %+v %v", res, err)
			}
			// an exempt lock skips the devices in the account's trust set
			tk := bucket.TrustKey(p, "account", "alice")
			if err := s.SetLock(ctx, alice, bucket.Lock{Kind: "lockout", Rule: "r", Until: until, Exempt: true}); err != nil {
				t.Fatal(err)
			}
			if err := s.Trust(ctx, alice, "d-good", until.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				device string
				trust  bool
				locked bool
			}{{"d-good", true, false}, {"d-evil", true, true}, {"", true, true}, {"d-good", false, true}} {
				req.Device, req.TrustKeys = tc.device, nil
				if tc.trust {
					req.TrustKeys = []string{tk}
				}
				if err := s.Decide(ctx, &req, &res); err != nil || res.Locked != tc.locked {
					t.Fatalf("exempt lock, device %q trust %v: locked=%v err=%v, want locked=%v", tc.device, tc.trust, res.Locked, err, tc.locked)
				}
			}
			if l, ok, _ := s.GetLock(ctx, alice); !ok || !l.Exempt {
				t.Fatalf("GetLock lost the exempt flag: %+v", l)
			}
			req.Device, req.TrustKeys = "", nil
			// an expired lock is not in force
			req.Now = until.Add(time.Second)
			if err := s.SetLock(ctx, alice, bucket.Lock{Kind: "step_up", Rule: "r", Until: until}); err != nil {
				t.Fatal(err)
			}
			if err := s.Decide(ctx, &req, &res); err != nil || res.Locked {
				t.Fatalf("expired lock: %+v %v", res, err)
			}
		})
	}
}

// TestConformance runs one long random sequence of decisions, multiplier
// changes and clock moves against both stores and requires bit-identical
// results: the memory store and decide.lua are one semantics.
func TestConformance(t *testing.T) {
	t.Parallel()
	c, p := testenv.Redis(t)
	mem := bucket.NewMemoryStore(bucket.MemoryOptions{Prefix: p})
	red := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: 5 * time.Second, ExpirySlack: 24 * time.Hour, Prefix: p})
	defer red.Close()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))

	subjects := []bucket.RequestSubject{
		{Key: bucket.MultiplierKey(p, "ip", "a"), Static: 1, Unverified: 1},
		{Key: bucket.MultiplierKey(p, "user", "b"), Static: 1, Unverified: 1},
		{Key: bucket.MultiplierKey(p, "device", "c"), Static: 1, Unverified: 1},
	}
	names := []bucket.Subject{{Kind: "ip", ID: "a"}, {Kind: "user", ID: "b"}, {Kind: "device", ID: "c"}} // of subjects
	all := []bucket.Limit{
		{Key: p + "{ip:a}:b:1", Burst: 10, Rate: 10, Period: time.Minute, Subjects: 1},
		{Key: p + "{user:b}:b:2", Burst: 3, Rate: 0.5, Period: time.Second, Subjects: 2},
		{Key: p + "{device:c}:b:3", Burst: 7, Rate: 100, Period: time.Hour, Subjects: 4 | 1},
		{Key: p + "{global}:b:4", Burst: 50, Rate: 1000, Period: time.Minute, Subjects: 0},
		{Key: p + "{ip:a}:b:5", Burst: 2, Rate: 1, Period: time.Second, Shadow: true, Subjects: 1},
	}
	sources := []string{"admin", "anomaly", "velocity", "attestation", "attestation"}
	values := []float64{0, 0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 3}
	now := t0
	var rm, rr bucket.Result
	for i := 0; i < 3000; i++ {
		switch r := rng.IntN(100); {
		case r < 60:
			now = now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
		case r < 62:
			now = now.Add(-time.Duration(rng.IntN(5000)) * time.Millisecond)
		case r < 63:
			now = now.Add(time.Duration(rng.IntN(7200)) * time.Second)
		}
		switch r := rng.IntN(100); {
		case r < 6:
			m := bucket.Multiplier{Source: sources[rng.IntN(len(sources))], Value: values[rng.IntN(len(values))], Reason: "r"}
			if rng.IntN(4) > 0 {
				m.ExpiresAt = now.Add(time.Duration(1+rng.IntN(600)) * time.Second)
			}
			sub := names[rng.IntN(len(subjects))]
			for _, s := range []bucket.Store{mem, red} {
				if err := s.SetMultiplier(ctx, sub, m); err != nil {
					t.Fatal(err)
				}
			}
			continue
		case r < 8:
			sub := names[rng.IntN(len(subjects))]
			src := sources[rng.IntN(len(sources))]
			for _, s := range []bucket.Store{mem, red} {
				if err := s.ClearMultiplier(ctx, sub, src); err != nil {
					t.Fatal(err)
				}
			}
			continue
		}
		req := bucket.Request{Now: now, Cost: float64(rng.IntN(4)), Subjects: subjects}
		switch rng.IntN(10) {
		case 0:
			req.Subjects = []bucket.RequestSubject{subjects[0], subjects[1], {Key: subjects[2].Key, Static: values[rng.IntN(len(values))], Unverified: values[rng.IntN(len(values))]}}
		case 1: // a subject known to the caller's cache
			pen := 0.0
			if rng.IntN(2) == 0 {
				pen = float64(now.Add(time.Duration(rng.IntN(600)) * time.Second).UnixMicro())
			}
			req.Subjects = []bucket.RequestSubject{subjects[0], {Key: subjects[1].Key, Static: 1, Unverified: 1, Cached: true, Mult: values[rng.IntN(len(values))], Pen: pen}, subjects[2]}
		}
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
	}
}

func diff(a, b *bucket.Result) string {
	if a.Allowed != b.Allowed || a.Locked != b.Locked || !a.Now.Equal(b.Now) || len(a.Limits) != len(b.Limits) {
		return "decision"
	}
	for i := range a.Limits {
		x, y := a.Limits[i], b.Limits[i]
		if x.Allowed != y.Allowed || math.Float64bits(x.Remaining) != math.Float64bits(y.Remaining) ||
			math.Float64bits(x.Burst) != math.Float64bits(y.Burst) || math.Float64bits(x.Multiplier) != math.Float64bits(y.Multiplier) ||
			!x.Reset.Equal(y.Reset) || x.RetryAfter != y.RetryAfter {
			return fmt.Sprintf("limit %d", i)
		}
	}
	if len(a.Subjects) != len(b.Subjects) {
		return "subjects"
	}
	for j := range a.Subjects {
		x, y := a.Subjects[j], b.Subjects[j]
		if x.Read != y.Read || math.Float64bits(x.Mult) != math.Float64bits(y.Mult) || math.Float64bits(x.Pen) != math.Float64bits(y.Pen) {
			return fmt.Sprintf("subject %d", j)
		}
	}
	return ""
}

// TestExactConcurrency: N parallel takes on a bucket of capacity C admit
// exactly C, in each store, and in Redis also through two client pools.
func TestExactConcurrency(t *testing.T) {
	t.Parallel()
	const n, capacity = 400, 57
	run := func(t *testing.T, deciders []bucket.Decider, key string) {
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(d bucket.Decider) {
				defer wg.Done()
				req := bucket.Request{Now: t0, Cost: 1, Limits: []bucket.Limit{
					{Key: key, Burst: capacity, Rate: 1, Period: time.Hour},
					{Key: key + "-wide", Burst: 1e6, Rate: 1, Period: time.Hour},
				}}
				var res bucket.Result
				if err := d.Decide(context.Background(), &req, &res); err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					allowed.Add(1)
				}
			}(deciders[i%len(deciders)])
		}
		wg.Wait()
		if got := allowed.Load(); got != capacity {
			t.Fatalf("admitted %d of %d, want exactly %d", got, n, capacity)
		}
	}
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		run(t, []bucket.Decider{bucket.NewMemoryStore(bucket.MemoryOptions{})}, "{ip:x}:b:c")
	})
	t.Run("redis-two-pools", func(t *testing.T) {
		t.Parallel()
		c1, p := testenv.Redis(t)
		c2, _ := testenv.Redis(t)
		s1 := bucket.NewRedisStore(c1, bucket.RedisOptions{Timeout: 5 * time.Second, ExpirySlack: 2 * time.Hour})
		s2 := bucket.NewRedisStore(c2, bucket.RedisOptions{Timeout: 5 * time.Second, ExpirySlack: 2 * time.Hour, Lanes: 2, MaxBatch: 7})
		defer s1.Close()
		defer s2.Close()
		run(t, []bucket.Decider{s1, s2}, p+"{ip:x}:b:c")
	})
}

// TestAttributeKeys: buckets keyed by attributes (tags and further parts
// built by AppendAttrTag and AppendKeyPart, escaped values included) are
// distinct buckets with one semantics in both stores, and Redis stores
// them under exactly the keys built.
func TestAttributeKeys(t *testing.T) {
	t.Parallel()
	key := func(p string, tagValue, part string) string {
		b := bucket.AppendAttrTag(nil, p, "tenant", tagValue)
		b = append(b, ":b:tenant"...)
		return string(bucket.AppendKeyPart(b, part))
	}
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s, p := sc.new(t)
			a := key(p, "acme", "free")
			if want := p + "{attr:tenant:acme}:b:tenant|free"; a != want {
				t.Fatalf("key %q, want %q", a, want)
			}
			// values that would collide unescaped: "a|b" + "c" vs "a" + "b|c"
			x, y := key(p, "a|b", "c"), key(p, "a", "b|c")
			if x == y || x != p+"{attr:tenant:a%7Cb}:b:tenant|c" || y != p+"{attr:tenant:a}:b:tenant|b%7Cc" {
				t.Fatalf("escaping: %q %q", x, y)
			}
			lim := func(k string) bucket.Limit { return bucket.Limit{Key: k, Burst: 2, Rate: 2, Period: time.Minute} }
			runSteps(t, s, bucket.Request{Limits: []bucket.Limit{lim(a), lim(x)}}, []step{
				{cost: 1, allowed: true, remaining: []float64{1, 1}},
				{cost: 1, allowed: true, remaining: []float64{0, 0}},
				{cost: 1, allowed: false, remaining: []float64{0, 0}, retry: []time.Duration{30 * time.Second, 30 * time.Second}},
			})
			// y is its own bucket: full
			runSteps(t, s, bucket.Request{Limits: []bucket.Limit{lim(y)}}, []step{
				{cost: 2, allowed: true, remaining: []float64{0}},
				{at: 15 * time.Second, cost: 1, allowed: false, remaining: []float64{0.5}, retry: []time.Duration{15 * time.Second}},
			})
			if sc.name == "redis" {
				c, _ := testenv.Redis(t)
				for _, k := range []string{a, x, y} {
					if n, err := c.Exists(context.Background(), k).Result(); err != nil || n != 1 {
						t.Errorf("redis key %q: exists %d %v", k, n, err)
					}
				}
			}
		})
	}
}

// TestRetryAfterAdmits: a bucket drained at some time admits, once nothing
// else took from it, a decision at that time plus the RetryAfter it gave
// (neither store's refill, rounded down to whole micro-tokens, falls
// short of the wait it computed), and both stores give the same wait.
// Buckets of random rates, bursts, multipliers and costs, drained once or
// over a while.
func TestRetryAfterAdmits(t *testing.T) {
	t.Parallel()
	c, p := testenv.Redis(t)
	mem := bucket.NewMemoryStore(bucket.MemoryOptions{Prefix: p})
	red := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: 5 * time.Second, ExpirySlack: 24 * time.Hour, Prefix: p})
	defer red.Close()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	periods := []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour}
	mults := []float64{0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 3}
	type trial struct {
		rate, burst, mult, cost float64
		period                  time.Duration
		spread                  bool // drained over a while, not at once
	}
	trials := []trial{{rate: 11, period: time.Minute, burst: 9, mult: 2, cost: 2}, {rate: 15.0 / 7, period: time.Hour, burst: 13, mult: 0.5, cost: 2}}
	for len(trials) < 1000 {
		tr := trial{
			rate:   float64(1+rng.IntN(97)) / float64(1+rng.IntN(7)),
			period: periods[rng.IntN(len(periods))],
			burst:  float64(1 + rng.IntN(20)),
			mult:   mults[rng.IntN(len(mults))],
			spread: rng.IntN(2) == 0,
		}
		effb := math.Floor(tr.burst * tr.mult)
		if effb < 1 {
			continue
		}
		tr.cost = float64(1 + rng.IntN(int(effb)))
		trials = append(trials, tr)
	}
	var rm, rr bucket.Result
	for i, tr := range trials {
		sub := bucket.RequestSubject{Key: bucket.MultiplierKey(p, "ip", fmt.Sprint("retry-", i)), Static: tr.mult, Unverified: 1}
		lim := bucket.Limit{Key: fmt.Sprintf("%s{ip:retry-%d}:b:r", p, i), Burst: tr.burst, Rate: tr.rate, Period: tr.period, Subjects: 1}
		now := t0.Add(time.Duration(rng.Int64N(int64(time.Hour))))
		decide := func(at time.Time) bool {
			req := bucket.Request{Now: at, Cost: tr.cost, Limits: []bucket.Limit{lim}, Subjects: []bucket.RequestSubject{sub}}
			if err := mem.Decide(ctx, &req, &rm); err != nil {
				t.Fatal(err)
			}
			if err := red.Decide(ctx, &req, &rr); err != nil {
				t.Fatal(err)
			}
			if d := diff(&rm, &rr); d != "" {
				t.Fatalf("trial %d %+v at %v: stores disagree: %s\nmemory: %+v\nredis:  %+v", i, tr, at.Sub(t0), d, rm, rr)
			}
			return rm.Allowed
		}
		for n := 0; decide(now); n++ {
			if n > 100 {
				t.Fatalf("trial %d %+v: not drained after %d decisions", i, tr, n)
			}
			if tr.spread { // by up to a quarter of the time a cost takes to refill
				now = now.Add(time.Duration(rng.Int64N(1 + int64(tr.cost/(tr.rate*tr.mult)*float64(tr.period)/4))))
			}
		}
		retry := rm.Limits[0].RetryAfter
		if retry <= 0 {
			t.Fatalf("trial %d %+v: refused with RetryAfter %v", i, tr, retry)
		}
		if !decide(now.Add(retry)) {
			t.Errorf("trial %d %+v: refused at %v, refused again at its RetryAfter %v later: %+v", i, tr, now.Sub(t0), retry, rm.Limits[0])
		}
	}
}
