package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
)

// countingStore counts decisions that reach the store.
type countingStore struct {
	bucket.Store
	calls atomic.Int64
}

func (c *countingStore) Decide(ctx context.Context, req *bucket.Request, res *bucket.Result) error {
	c.calls.Add(1)
	return c.Store.Decide(ctx, req, res)
}

const hotPolicy = `version: 1
routes:
  - {match: "POST /auth/login", class: auth}
limits:
  - {name: per-ip, by: [ip], rate: 10/s}
  - {name: per-device, by: [device], rate: 600/min}
`

func l1Engine(t testing.TB, store bucket.Store, l1 *L1, now *time.Time) *Engine {
	p, err := policy.Parse("p.yaml", []byte(hotPolicy))
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Options{Store: store, Policy: func() *policy.Policy { return p }, L1: l1, Clock: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestL1DeniesLocallyUntilRetry: once the store says a bucket is empty,
// requests are denied locally until its retry time, then go to the store.
func TestL1DeniesLocallyUntilRetry(t *testing.T) {
	t.Parallel()
	now := time.Unix(1700000000, 0)
	store := &countingStore{Store: bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return now }})}
	e := l1Engine(t, store, NewL1(L1Options{TTL: time.Second}), &now)
	in := Input{Endpoint: "GET /x", IP: "192.0.2.1", DeviceID: "d", Cost: 1}
	var d Decision
	for i := 0; i < 10; i++ {
		_ = e.Decide(context.Background(), &in, &d)
	}
	_ = e.Decide(context.Background(), &in, &d) // the store says: empty, retry in 100ms
	if d.Outcome != Limited || d.RetryAfter != 100*time.Millisecond || d.FromL1() || store.calls.Load() != 11 {
		t.Fatalf("11th: %v %v l1=%v calls=%d", d.Outcome, d.RetryAfter, d.FromL1(), store.calls.Load())
	}
	now = now.Add(40 * time.Millisecond)
	for i := 0; i < 1000; i++ {
		_ = e.Decide(context.Background(), &in, &d)
		if d.Outcome != Limited || !d.FromL1() || d.RetryAfter != 60*time.Millisecond || d.Binding.Name != "per-ip" || d.Limit != 10 {
			t.Fatalf("cached denial %d: %+v", i, d)
		}
	}
	if store.calls.Load() != 11 {
		t.Fatalf("store calls %d, want 11", store.calls.Load())
	}
	// a cheaper request is not denied by a costlier denial... and a cost-0 peek passes
	in.Cost = 0
	_ = e.Decide(context.Background(), &in, &d)
	if d.Outcome != Allowed || d.FromL1() {
		t.Fatalf("peek: %+v", d)
	}
	in.Cost = 1
	now = now.Add(60 * time.Millisecond) // the retry time has come: ask the store
	_ = e.Decide(context.Background(), &in, &d)
	if d.Outcome != Allowed || d.FromL1() {
		t.Fatalf("after retry time: %v l1=%v", d.Outcome, d.FromL1())
	}
}

func TestL1Locks(t *testing.T) {
	t.Parallel()
	now := time.Unix(1700000000, 0)
	mem := bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return now }})
	store := &countingStore{Store: mem}
	e := l1Engine(t, store, NewL1(L1Options{TTL: 200 * time.Millisecond}), &now)
	_ = mem.SetLock(context.Background(), bucket.Subject{Kind: "account", ID: "alice"}, bucket.Lock{Kind: "lockout", Rule: "r", Until: now.Add(time.Minute)})
	in := Input{Endpoint: "POST /auth/login", IP: "192.0.2.1", Account: "alice", Cost: 1}
	var d Decision
	for i := 0; i < 100; i++ {
		_ = e.Decide(context.Background(), &in, &d)
		if d.Outcome != Locked || d.LockScope != "account" {
			t.Fatalf("%d: %+v", i, d)
		}
	}
	if store.calls.Load() != 1 {
		t.Fatalf("store calls %d, want 1", store.calls.Load())
	}
	// lifted by the admin: seen once the lock TTL has passed
	_, _ = mem.ClearLock(context.Background(), bucket.Subject{Kind: "account", ID: "alice"})
	now = now.Add(200 * time.Millisecond)
	_ = e.Decide(context.Background(), &in, &d)
	if d.Outcome != Allowed {
		t.Fatalf("after lift + TTL: %v", d.Outcome)
	}
}

func TestL1Bounded(t *testing.T) {
	t.Parallel()
	c := NewL1(L1Options{MaxEntries: 3200})
	now := time.Unix(1700000000, 0)
	for i := 0; i < 200_000; i++ {
		c.put("k"+itoa(i), l1Entry{until: now.Add(time.Hour)}, now)
	}
	if n := c.Len(); n > 3200 {
		t.Fatalf("L1 holds %d entries, bound 3200", n)
	}
}

func itoa(i int) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		i /= 10
		if i == 0 {
			return string(b)
		}
	}
}

// TestL1HotKeyCostsRedisLittle: one key attacked at full speed costs Redis
// at most 10% of the requests' round trips (real Redis).
func TestL1HotKeyCostsRedisLittle(t *testing.T) {
	t.Parallel()
	c, prefix := testenv.Redis(t)
	rs := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: time.Second, Prefix: prefix})
	defer rs.Close()
	store := &countingStore{Store: rs}
	p, _ := policy.Parse("p.yaml", []byte(hotPolicy))
	e, _ := New(Options{Store: store, Policy: func() *policy.Policy { return p }, L1: NewL1(L1Options{})})
	in := Input{Endpoint: "GET /x", IP: "192.0.2.1", DeviceID: "hot", Cost: 1}
	var d Decision
	const n = 20000
	allowed := 0
	start := time.Now()
	for i := 0; i < n; i++ {
		_ = e.Decide(context.Background(), &in, &d)
		if d.Outcome == Allowed {
			allowed++
		}
	}
	elapsed := time.Since(start)
	calls := store.calls.Load()
	// the bucket refills 10/s: what passes is the burst plus the refill
	if max := 10 + int(elapsed.Seconds()*10) + 1; allowed > max {
		t.Fatalf("allowed %d in %v, the policy allows at most %d", allowed, elapsed, max)
	}
	if calls*10 > n {
		t.Fatalf("Redis saw %d of %d decisions (%.1f%%), want <= 10%%", calls, n, 100*float64(calls)/n)
	}
	t.Logf("hot key: %d requests, %d reached Redis (%.2f%%), %d allowed in %v", n, calls, 100*float64(calls)/n, allowed, elapsed)
}

// BenchmarkHotKeyRedisOps reports the share of decisions that reach Redis
// for one key attacked at full speed, with and without the L1 cache.
func BenchmarkHotKeyRedisOps(b *testing.B) {
	for _, withL1 := range []bool{false, true} {
		name := "without-L1"
		if withL1 {
			name = "with-L1"
		}
		b.Run(name, func(b *testing.B) {
			c, prefix := testenv.Redis(b)
			rs := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: time.Second, Prefix: prefix})
			defer rs.Close()
			store := &countingStore{Store: rs}
			p, _ := policy.Parse("p.yaml", []byte(hotPolicy))
			o := Options{Store: store, Policy: func() *policy.Policy { return p }}
			if withL1 {
				o.L1 = NewL1(L1Options{})
			}
			e, _ := New(o)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				in := Input{Endpoint: "GET /x", IP: "192.0.2.1", DeviceID: "hot", Cost: 1}
				var d Decision
				for pb.Next() {
					_ = e.Decide(context.Background(), &in, &d)
				}
			})
			b.ReportMetric(float64(store.calls.Load())/float64(b.N), "redis-calls/op")
		})
	}
}

// TestL1CachesMultipliers: a subject's multiplier is read once per TTL;
// a change made elsewhere is seen once the TTL has passed, one made
// through this limiter (the store Wrap returns) at once.
func TestL1CachesMultipliers(t *testing.T) {
	t.Parallel()
	now := time.Unix(1700000000, 0)
	mem := bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return now }})
	reads := &subjectReads{Store: mem}
	l1 := NewL1(L1Options{TTL: 300 * time.Millisecond})
	e := l1Engine(t, reads, l1, &now)
	in := Input{Endpoint: "GET /x", IP: "192.0.2.1", DeviceID: "d", DeviceVerified: true, Cost: 0}
	var d Decision
	_ = e.Decide(context.Background(), &in, &d)
	_ = e.Decide(context.Background(), &in, &d)
	if reads.read.Load() != 2 || reads.cached.Load() != 2 { // ip and device, read once then cached
		t.Fatalf("reads %d cached %d", reads.read.Load(), reads.cached.Load())
	}
	dev := bucket.Subject{Kind: "device", ID: "d"}
	_ = mem.SetMultiplier(context.Background(), dev, bucket.Multiplier{Source: "admin", Value: 0.5})
	now = now.Add(100 * time.Millisecond)
	_ = e.Decide(context.Background(), &in, &d)
	if d.Binding.Name != "per-ip" || d.Limit != 10 { // per-device still 600 from the cache: per-ip binds
		t.Fatalf("within TTL: %s %d", d.Binding.Name, d.Limit)
	}
	now = now.Add(200 * time.Millisecond) // TTL over: read again
	_ = e.Decide(context.Background(), &in, &d)
	in2 := in
	_ = e.Decide(context.Background(), &in2, &d)
	if reads.read.Load() != 4 {
		t.Fatalf("after TTL: reads %d, want 4", reads.read.Load())
	}
	_ = l1.Wrap(mem).SetMultiplier(context.Background(), dev, bucket.Multiplier{Source: "admin", Value: 0.5})
	_ = e.Decide(context.Background(), &in, &d)
	if reads.read.Load() != 5 {
		t.Fatalf("after a write through the cache: reads %d, want 5", reads.read.Load())
	}
}

// subjectReads counts subjects the store read and those the cache supplied.
type subjectReads struct {
	bucket.Store
	read, cached atomic.Int64
}

func (s *subjectReads) Decide(ctx context.Context, req *bucket.Request, res *bucket.Result) error {
	for _, sub := range req.Subjects {
		if sub.Cached {
			s.cached.Add(1)
		} else {
			s.read.Add(1)
		}
	}
	return s.Store.Decide(ctx, req, res)
}
