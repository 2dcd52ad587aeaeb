package risk_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/risk"
)

// TestLease: one holder at a time; a holder that stops releases the lease
// and another acquires it; a lease taken over underneath its holder makes
// Hold return at the next renewal.
func TestLease(t *testing.T) {
	t.Parallel()
	c, prefix := testenv.Redis(t)
	key := prefix + "leader"
	a := risk.NewLease(c, key, "a", 300*time.Millisecond)
	b := risk.NewLease(c, key, "b", 300*time.Millisecond)
	ctx := context.Background()
	if err := a.Acquire(ctx, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	if err := b.Acquire(short, 10*time.Millisecond); err == nil {
		t.Fatal("b acquired a lease a holds")
	}
	cancel()
	// a holds (renews) and then stops: the lease is released at once
	hctx, stop := context.WithCancel(ctx)
	held := make(chan error, 1)
	go func() { held <- a.Hold(hctx) }()
	stop()
	if err := <-held; err != nil {
		t.Fatalf("Hold after stop: %v", err)
	}
	if v, _ := c.Get(ctx, key).Result(); v != "" {
		t.Fatalf("lease still held by %q after release", v)
	}
	if err := b.Acquire(ctx, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// someone else takes the key: b's next renewal fails and Hold returns
	go func() { held <- b.Hold(ctx) }()
	c.Set(ctx, key, "intruder", time.Minute)
	select {
	case err := <-held:
		if err == nil {
			t.Fatal("Hold returned nil after losing the lease")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Hold did not notice the lost lease")
	}
}

// TestLeaseStalledRedis (7.5): two holders contend for a lease on a
// private redis-server that is paused (SIGSTOP) for three TTLs, through
// clients with go-redis's default timeouts and retries (a request against
// a stalled server takes about 9 s). The holder stops acting (Valid turns
// false, Hold returns) within a third of the TTL of a renewal it could not
// make, and at no sample are both valid; after SIGCONT exactly one holds.
func TestLeaseStalledRedis(t *testing.T) {
	t.Parallel()
	rs := testenv.StartRedis(t)
	const ttl = 600 * time.Millisecond
	var leases [2]*risk.Lease
	for i, owner := range []string{"a", "b"} {
		c := redis.NewClient(&redis.Options{Addr: rs.Addr})
		t.Cleanup(func() { _ = c.Close() })
		leases[i] = risk.NewLease(c, "leader", owner, ttl)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := leases[0].Acquire(ctx, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// each contender: acquire, hold until lost, again; lost counts the
	// leaderships that ended
	var lost [2]atomic.Int32
	var wg sync.WaitGroup
	for i := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if i == 1 || lost[0].Load() > 0 {
					if leases[i].Acquire(ctx, 20*time.Millisecond) != nil {
						return
					}
				}
				_ = leases[i].Hold(ctx)
				lost[i].Add(1)
			}
		}()
	}
	// the sampler: never both valid
	var both atomic.Int32
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if leases[0].Valid() && leases[1].Valid() {
				both.Add(1)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	if !leases[0].Valid() || leases[1].Valid() {
		t.Fatal("want a valid, b not")
	}
	rs.Pause(t)
	paused := time.Now()
	testenv.Eventually(t, 5*time.Second, func() string {
		if lost[0].Load() == 0 {
			return "the holder has not noticed the stalled renewal"
		}
		return ""
	})
	// a renewal is due every ttl/3 and may take ttl/3: Valid ended within
	// 2/3 ttl of the pause, before the lease in Redis (ttl) could expire
	if leases[0].Valid() {
		t.Fatal("Hold returned but the lease is still valid")
	}
	// not a wait for a condition but the window the property is about:
	// for 3 ttl of a stalled Redis (past the lease's expiry in Redis) no
	// one may act, checked every 5ms throughout, not once after a pause
	for time.Since(paused) < 3*ttl {
		if leases[0].Valid() || leases[1].Valid() {
			t.Fatal("a lease is valid while Redis is paused")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rs.Resume(t)
	testenv.Eventually(t, 10*time.Second, func() string {
		if leases[0].Valid() == leases[1].Valid() {
			return "not exactly one holder after SIGCONT"
		}
		return ""
	})
	cancel()
	wg.Wait()
	if n := both.Load(); n != 0 {
		t.Fatalf("both held a valid lease at %d samples", n)
	}
}

// TestLeadReleasesAfterRun: Lead runs its function while the lease is
// held; when Lead's context ends, the function's context ends first and
// the lease stays held (and valid, another contender kept out) until the
// function has returned, so what it finishes after its end (the message
// in flight) is done by the leader; only then is the lease released. A
// lease taken over underneath ends the function's context too, and Lead
// returns ErrLeaseLost once the function has returned.
func TestLeadReleasesAfterRun(t *testing.T) {
	t.Parallel()
	c, prefix := testenv.Redis(t)
	key := prefix + "leader"
	const ttl = 300 * time.Millisecond
	a := risk.NewLease(c, key, "a", ttl)
	b := risk.NewLease(c, key, "b", ttl)
	ctx := context.Background()
	if err := a.Acquire(ctx, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(ctx)
	ended := make(chan struct{})
	finish := make(chan struct{})
	var during []string
	led := make(chan error, 1)
	go func() {
		led <- a.Lead(lctx, func(ctx context.Context) error {
			<-ctx.Done()
			close(ended)
			<-finish // the message in flight is finished now
			// b tries for two TTLs: the lease stays only if it is renewed
			v, _ := c.Get(context.Background(), key).Result()
			short, cancel := context.WithTimeout(context.Background(), 2*ttl)
			defer cancel()
			took := b.Acquire(short, 10*time.Millisecond) == nil
			during = append(during, fmt.Sprintf("valid=%v holder=%s b-acquired=%v", a.Valid(), v, took))
			return nil
		})
	}()
	stop()
	<-ended
	close(finish)
	if err := <-led; err != nil {
		t.Fatalf("Lead after its context ended: %v", err)
	}
	if want := "valid=true holder=a b-acquired=false"; len(during) != 1 || during[0] != want {
		t.Fatalf("while the function finished: %v, want %s", during, want)
	}
	if v, _ := c.Get(ctx, key).Result(); v != "" {
		t.Fatalf("lease still held by %q after Lead returned", v)
	}
	// lost underneath: the function's context ends, Lead says so
	if err := b.Acquire(ctx, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	go func() {
		led <- b.Lead(ctx, func(ctx context.Context) error {
			<-ctx.Done()
			if b.Valid() {
				return errors.New("valid after the lease was lost")
			}
			return nil
		})
	}()
	c.Set(ctx, key, "intruder", time.Minute)
	select {
	case err := <-led:
		if !errors.Is(err, risk.ErrLeaseLost) {
			t.Fatalf("Lead after the lease was lost: %v, want ErrLeaseLost", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lead did not notice the lost lease")
	}
}

// TestLeadStopGrace: a run that does not return after Lead's context
// ended keeps the lease only for StopGrace: then Valid turns false and the
// lease is released, and another contender acquires it, while the run is
// still stuck.
func TestLeadStopGrace(t *testing.T) {
	t.Parallel()
	c, prefix := testenv.Redis(t)
	key := prefix + "leader"
	const ttl = 300 * time.Millisecond
	a := risk.NewLease(c, key, "a", ttl)
	a.StopGrace = 4 * ttl
	b := risk.NewLease(c, key, "b", ttl)
	ctx := context.Background()
	if err := a.Acquire(ctx, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(ctx)
	stuck := make(chan struct{})
	led := make(chan error, 1)
	go func() {
		led <- a.Lead(lctx, func(ctx context.Context) error {
			<-ctx.Done()
			<-stuck // ignores its end
			return nil
		})
	}()
	stop()
	t0 := time.Now()
	actx, cancel := context.WithTimeout(ctx, a.StopGrace+5*time.Second)
	defer cancel()
	if err := b.Acquire(actx, 10*time.Millisecond); err != nil {
		t.Fatalf("b did not acquire the lease of a stuck run: %v", err)
	}
	took := time.Since(t0)
	if a.Valid() {
		t.Fatal("a still valid after b acquired the lease")
	}
	// held (renewed) through the grace, released at its end
	if took < a.StopGrace || took > a.StopGrace+time.Second {
		t.Fatalf("b acquired the lease %v after a's stop, want after StopGrace %v", took, a.StopGrace)
	}
	close(stuck)
	if err := <-led; err != nil {
		t.Fatalf("Lead: %v", err)
	}
}
