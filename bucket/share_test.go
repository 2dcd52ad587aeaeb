package bucket_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
)

var shareT0 = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)

// countingStore counts the decisions that reach the store.
type countingStore struct {
	bucket.Decider
	n atomic.Int64
}

func (c *countingStore) Decide(ctx context.Context, req *bucket.Request, res *bucket.Result) error {
	c.n.Add(1)
	return c.Decider.Decide(ctx, req, res)
}

// hotLimit is a global limit of capacity burst refilling rate per second,
// shared 10ms at a time.
func hotLimit(key string, burst, rate float64) bucket.Limit {
	return bucket.Limit{Key: key, Burst: burst, Rate: rate, Period: time.Second, Share: 10 * time.Millisecond}
}

func decideAt(t *testing.T, d bucket.Decider, at time.Time, limits ...bucket.Limit) bucket.Result {
	t.Helper()
	var res bucket.Result
	if err := d.Decide(context.Background(), &bucket.Request{Now: at, Cost: 1, Limits: limits}, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// With time standing still, a shared limit admits exactly its capacity:
// its shares are taken from the bucket before they are handed out, and
// once the bucket holds less than a share, the rest go one by one.
func TestShareAdmitsExactlyTheBucket(t *testing.T) {
	store := &countingStore{Decider: bucket.NewMemoryStore(bucket.MemoryOptions{})}
	s := bucket.NewShares(store, bucket.ShareOptions{})
	lim := hotLimit("{global}:b:all", 1000, 1000) // share: 10 tokens
	admitted := 0
	for i := 0; i < 1200; i++ {
		if decideAt(t, s, shareT0, lim).Allowed {
			admitted++
		}
		s.Wait()
	}
	if admitted != 1000 {
		t.Fatalf("admitted %d of capacity 1000", admitted)
	}
	// most decisions were served from shares: 1,000 tokens in shares of
	// 10 are about 100 refills, and the 200 refusals each reach the store
	if got := store.n.Load(); got > 400 {
		t.Fatalf("%d decisions reached the store for 1200 decisions", got)
	}
}

// A decision another limit refuses takes nothing from the shared limit:
// its token goes back to the share, so the shared bucket still admits
// exactly its capacity.
func TestShareRefusalGivesTokensBack(t *testing.T) {
	s := bucket.NewShares(bucket.NewMemoryStore(bucket.MemoryOptions{}), bucket.ShareOptions{})
	hot := hotLimit("{global}:b:all", 10, 100) // share: 1 token
	tight := bucket.Limit{Key: "{user:1}:b:user", Burst: 1, Rate: 1, Period: time.Hour}
	admitted := 0
	for i := 0; i < 3; i++ { // hot, then a share
		if decideAt(t, s, shareT0, hot).Allowed {
			admitted++
		}
		s.Wait()
	}
	if !decideAt(t, s, shareT0, hot, tight).Allowed {
		t.Fatal("first decision with the tight limit refused")
	}
	admitted++
	s.Wait()
	for i := 0; i < 5; i++ {
		if res := decideAt(t, s, shareT0, hot, tight); res.Allowed || res.Limits[1].Allowed {
			t.Fatalf("refusal %d: %+v", i, res)
		}
		s.Wait()
	}
	for i := 0; i < 20; i++ {
		if decideAt(t, s, shareT0, hot).Allowed {
			admitted++
		}
		s.Wait()
	}
	if admitted != 10 {
		t.Fatalf("admitted %d of capacity 10", admitted)
	}
}

// Tokens held lapse after Share: a share never serves past it, so a
// multiplier written meanwhile applies from the next refill.
func TestShareLapsesAndSeesMultipliers(t *testing.T) {
	mem := bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return shareT0 }})
	store := &countingStore{Decider: mem}
	s := bucket.NewShares(store, bucket.ShareOptions{})
	sub := bucket.Subject{Kind: "route", ID: "all"}
	key := bucket.MultiplierKey(mem.Prefix(), sub.Kind, sub.ID)
	lim := hotLimit("{global}:b:all", 100000, 100000) // share: 1,000 tokens
	lim.Subjects = 1
	dec := func(at time.Time) bucket.Result {
		var res bucket.Result
		req := bucket.Request{Now: at, Cost: 1, Limits: []bucket.Limit{lim},
			Subjects: []bucket.RequestSubject{{Key: key, Static: 1, Unverified: 1}}}
		if err := s.Decide(context.Background(), &req, &res); err != nil {
			t.Fatal(err)
		}
		s.Wait()
		return res
	}
	dec(shareT0)
	dec(shareT0)
	n := store.n.Load()
	if res := dec(shareT0.Add(time.Millisecond)); res.Limits[0].Multiplier != 1 || store.n.Load() != n {
		t.Fatalf("share not used: %+v, %d store calls", res, store.n.Load()-n)
	}
	if err := mem.SetMultiplier(context.Background(), sub, bucket.Multiplier{Source: "admin", Value: 0.5}); err != nil {
		t.Fatal(err)
	}
	// within the share's 10ms the old multiplier still serves; after it,
	// the store decides and the next share carries the new one
	if res := dec(shareT0.Add(9 * time.Millisecond)); res.Limits[0].Multiplier != 1 {
		t.Fatalf("inside the share: multiplier %v", res.Limits[0].Multiplier)
	}
	if res := dec(shareT0.Add(11 * time.Millisecond)); res.Limits[0].Multiplier != 0.5 {
		t.Fatalf("after the share lapsed: multiplier %v", res.Limits[0].Multiplier)
	}
}

// Locks are never shared: a locked subject is refused although every
// limit of the decision holds a share.
func TestShareLocksStillApply(t *testing.T) {
	mem := bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return shareT0 }})
	s := bucket.NewShares(mem, bucket.ShareOptions{})
	lim := hotLimit("{global}:b:all", 100000, 100000)
	for i := 0; i < 3; i++ {
		decideAt(t, s, shareT0, lim)
		s.Wait()
	}
	sub := bucket.Subject{Kind: "ip", ID: "198.51.100.7"}
	if err := mem.SetLock(context.Background(), sub, bucket.Lock{Kind: "lockout", Rule: "admin", Until: shareT0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	var res bucket.Result
	req := bucket.Request{Now: shareT0, Cost: 1, Limits: []bucket.Limit{lim},
		Locks: []string{bucket.LockKey(mem.Prefix(), sub.Kind, sub.ID)}, TrustKeys: []string{""}}
	if err := s.Decide(context.Background(), &req, &res); err != nil {
		t.Fatal(err)
	}
	if res.Allowed || !res.Locked {
		t.Fatalf("locked request: %+v", res)
	}
}

// N concurrent decisions over three limiters' shares of one Redis bucket
// of capacity C admit at most C, and at least C minus what three
// limiters can hold (1.5 shares each: a refill starts below half a share).
func TestShareConcurrentRedis(t *testing.T) {
	c, prefix := testenv.Redis(t)
	store := bucket.NewRedisStore(c, bucket.RedisOptions{Prefix: prefix, Timeout: time.Second, ExpirySlack: time.Hour})
	defer store.Close()
	const capacity, share = 2000, 50 // rate 5000/s: 50 tokens per 10ms
	lim := bucket.Limit{Key: prefix + "{global}:b:all", Burst: capacity, Rate: 5000, Period: time.Second, Share: 10 * time.Millisecond}
	now := time.Now()
	limiters := []*bucket.Shares{bucket.NewShares(store, bucket.ShareOptions{}), bucket.NewShares(store, bucket.ShareOptions{}), bucket.NewShares(store, bucket.ShareOptions{})}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 30; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			s := limiters[g%3]
			for i := 0; i < 100; i++ {
				var res bucket.Result
				if err := s.Decide(context.Background(), &bucket.Request{Now: now, Cost: 1, Limits: []bucket.Limit{lim}}, &res); err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					admitted.Add(1)
				}
			}
		}(g)
	}
	wg.Wait()
	for _, s := range limiters {
		s.Wait()
	}
	if got := admitted.Load(); got > capacity || got < capacity-3*share*3/2 {
		t.Fatalf("admitted %d of capacity %d (bound: %d..%d)", got, capacity, capacity-3*share*3/2, capacity)
	}
}

// costCounter counts what reaches the store: the decisions themselves
// (cost 1) apart from the shares' refills (more than one token).
type costCounter struct {
	bucket.Decider
	decisions, refills atomic.Int64
}

func (c *costCounter) Decide(ctx context.Context, req *bucket.Request, res *bucket.Result) error {
	if req.Cost == 1 {
		c.decisions.Add(1)
	} else {
		c.refills.Add(1)
	}
	return c.Decider.Decide(ctx, req, res)
}

// hotRun has each of procs limiters (Shares over one store) decide one
// request on lim every step of injected time for d, and returns how many
// were admitted.
func hotRun(t *testing.T, procs []*bucket.Shares, lim bucket.Limit, step, d time.Duration) int {
	t.Helper()
	admitted := 0
	for at := shareT0; at.Before(shareT0.Add(d)); at = at.Add(step) {
		for _, s := range procs {
			if decideAt(t, s, at, lim).Allowed {
				admitted++
			}
			s.Wait()
		}
	}
	return admitted
}

// A key's share is sized by what its limiter asks of it, not by the
// limit's rate: four limiters asking 10,000 tokens a second each of a
// 100,000/s global limit each take about what they use, so the bucket
// keeps enough for all of them and nearly every decision is served from a
// share. Shares of the limit's rate (1,000 tokens per 10 ms each, four
// times what the bucket refills) left the bucket empty: refills were
// refused and 22,576 of the decisions went to the store.
func TestShareLeasesWhatItUses(t *testing.T) {
	store := &costCounter{Decider: bucket.NewMemoryStore(bucket.MemoryOptions{})}
	var procs []*bucket.Shares
	for range 4 {
		procs = append(procs, bucket.NewShares(store, bucket.ShareOptions{}))
	}
	lim := hotLimit("{global}:b:all", 100000, 100000) // at most 1,000 tokens a share
	if got := hotRun(t, procs, lim, 100*time.Microsecond, time.Second); got != 40000 {
		t.Fatalf("admitted %d of 40,000 decisions at 40%% of the limit's rate", got)
	}
	d, r := store.decisions.Load(), store.refills.Load()
	t.Logf("%d decisions and %d refills reached the store", d, r)
	// each limiter: its key's first decision and the one that made it hot,
	// then a refill every half share (5 ms)
	if d != 8 || r > 4*201 {
		t.Fatalf("%d decisions and %d refills reached the store for 40,000 decisions, want 8 and at most 804", d, r)
	}
}

// A share is refilled before it lapses: at half its life the next refill
// starts, so a key asked for steadily reaches the store only through its
// refills, not with the decisions that find a share lapsed (one per
// share's life before).
func TestShareRefillsBeforeItLapses(t *testing.T) {
	store := &costCounter{Decider: bucket.NewMemoryStore(bucket.MemoryOptions{})}
	s := bucket.NewShares(store, bucket.ShareOptions{})
	lim := hotLimit("{global}:b:all", 1e7, 1e7) // shares of up to 100,000 tokens
	if got := hotRun(t, []*bucket.Shares{s}, lim, 100*time.Microsecond, time.Second); got != 10000 {
		t.Fatalf("admitted %d of 10,000", got)
	}
	t.Logf("%d decisions and %d refills reached the store", store.decisions.Load(), store.refills.Load())
	if d := store.decisions.Load(); d > 2 {
		t.Fatalf("%d decisions reached the store past the first two (the key's first and the one that made it hot)", d-2)
	}
}

// A key that went cold is measured afresh when it is hot again: what it
// asked for before its silence does not shrink its next share. Averaged
// over a minute of silence, a key asked for 10,000 times a second came
// back with a share of one token, and a third decision went to the store
// before a refill of the right size came back.
func TestShareAfterSilence(t *testing.T) {
	store := &costCounter{Decider: bucket.NewMemoryStore(bucket.MemoryOptions{})}
	s := bucket.NewShares(store, bucket.ShareOptions{})
	lim := hotLimit("{global}:b:all", 1e7, 1e7)
	burst := func(from time.Time) {
		for at := from; at.Before(from.Add(50 * time.Millisecond)); at = at.Add(100 * time.Microsecond) {
			if !decideAt(t, s, at, lim).Allowed {
				t.Fatalf("refused at %v", at.Sub(shareT0))
			}
			s.Wait()
		}
	}
	burst(shareT0)
	before := store.decisions.Load()
	burst(shareT0.Add(time.Minute))
	if d := store.decisions.Load() - before; d > 2 {
		t.Fatalf("%d decisions reached the store after a minute's silence, want the 2 that make the key hot again", d)
	}
}

// A shadow limit behind shares reports what the store alone reports,
// within the share bound: a refill the shadow limit would refuse (it
// never denies, so the decision is allowed) hands out no tokens.
func TestShareShadowLimited(t *testing.T) {
	alone := bucket.NewMemoryStore(bucket.MemoryOptions{})
	s := bucket.NewShares(bucket.NewMemoryStore(bucket.MemoryOptions{}), bucket.ShareOptions{})
	lim := hotLimit("{global}:b:all", 100, 1000) // share: 10 tokens
	lim.Shadow = true
	withinAlone, withinShares := 0, 0
	for i := 0; i < 300; i++ {
		at := shareT0.Add(time.Duration(i) * 100 * time.Microsecond) // 10,000/s against 1,000/s
		ra, rs := decideAt(t, alone, at, lim), decideAt(t, s, at, lim)
		s.Wait()
		if !ra.Allowed || !rs.Allowed {
			t.Fatalf("decision %d: a shadow limit denied (alone %+v, shares %+v)", i, ra, rs)
		}
		if ra.Limits[0].Allowed {
			withinAlone++
		}
		if rs.Limits[0].Allowed {
			withinShares++
		}
	}
	// shares may refuse early by what one process holds: 1.5 shares
	if withinShares > withinAlone || withinShares < withinAlone-15 {
		t.Fatalf("shadow limit within its budget %d times behind shares, %d times alone", withinShares, withinAlone)
	}
}
