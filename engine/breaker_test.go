package engine

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// allow is Allow for a call the test expects to be let through.
func allow(t *testing.T, b *Breaker, what string) BreakerCall {
	t.Helper()
	c, ok := b.Allow()
	if !ok {
		t.Fatalf("%s refused (breaker %v)", what, b.State())
	}
	return c
}

// TestBreakerStaleResultsDoNotDecide: a call let through while the circuit
// was closed that ends once it is half-open says nothing of the probe: a
// stale failure neither reopens the circuit nor frees the probe's slot (a
// second probe would then run beside the first), a stale abandon frees no
// slot, and a stale success does not close it. Only the probe's own
// result does.
func TestBreakerStaleResultsDoNotDecide(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	b := NewBreaker(BreakerOptions{Failures: 2, Cooldown: time.Second}, func() time.Time { return now }, nil)
	slow1, slow2, slow3 := allow(t, b, "slow call"), allow(t, b, "slow call"), allow(t, b, "slow call")
	for i := 0; i < 2; i++ {
		b.Done(allow(t, b, "failing call"), false)
	}
	if b.State() != BreakerOpen {
		t.Fatalf("state %v after 2 failures, want open", b.State())
	}
	now = now.Add(time.Second)
	probe := allow(t, b, "probe after the cooldown")
	b.Done(slow1, false) // stale
	if st := b.State(); st != BreakerHalfOpen {
		t.Fatalf("a stale failure turned the half-open breaker %v", st)
	}
	b.Abandon(slow2) // stale
	now = now.Add(time.Second)
	if _, ok := b.Allow(); ok {
		t.Fatal("a second probe let through while the first is in flight")
	}
	b.Done(slow3, true) // stale
	if st := b.State(); st != BreakerHalfOpen {
		t.Fatalf("a stale success turned the half-open breaker %v", st)
	}
	b.Done(probe, true)
	if st := b.State(); st != BreakerClosed {
		t.Fatalf("the probe's success left the breaker %v", st)
	}
}

// TestBreakerStaleAfterReclose: failures of calls let through before the
// circuit opened that end after a probe closed it again do not count
// toward opening it anew; an abandoned probe frees its slot.
func TestBreakerStaleAfterReclose(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	b := NewBreaker(BreakerOptions{Failures: 2, Cooldown: time.Second}, func() time.Time { return now }, nil)
	slow := []BreakerCall{allow(t, b, "slow call"), allow(t, b, "slow call")}
	b.Done(allow(t, b, "call"), false)
	b.Done(allow(t, b, "call"), false)
	now = now.Add(time.Second)
	b.Abandon(allow(t, b, "probe"))
	b.Done(allow(t, b, "probe after an abandoned one"), true)
	for _, c := range slow {
		b.Done(c, false)
	}
	if st := b.State(); st != BreakerClosed {
		t.Fatalf("two stale failures turned the closed breaker %v", st)
	}
	b.Done(allow(t, b, "call"), false)
	if st := b.State(); st != BreakerClosed {
		t.Fatalf("one failure turned the breaker %v, want closed (2 open it)", st)
	}
	b.Done(allow(t, b, "call"), false)
	if st := b.State(); st != BreakerOpen {
		t.Fatalf("two failures left the breaker %v, want open", st)
	}
}

// TestBreakerConcurrentHalfOpen: while one probe is in flight, N callers
// at once get no second one, and N stale calls ending at once (failures
// and successes) neither free its slot nor decide the state; the probe's
// failure reopens the circuit for a full cooldown, after which exactly one
// of N concurrent callers probes again.
func TestBreakerConcurrentHalfOpen(t *testing.T) {
	t.Parallel()
	const n = 64
	var mu sync.Mutex
	now := time.Unix(0, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	b := NewBreaker(BreakerOptions{Failures: 3, Cooldown: time.Second}, clock, nil)
	slow := make([]BreakerCall, n) // let through while closed, ending late
	for i := range slow {
		slow[i] = allow(t, b, "slow call")
	}
	for i := 0; i < 3; i++ {
		b.Done(allow(t, b, "failing call"), false)
	}
	advance(time.Second)
	var probe BreakerCall
	var pmu sync.Mutex
	tryProbe := func(int) bool {
		c, ok := b.Allow()
		if ok {
			pmu.Lock()
			probe = c
			pmu.Unlock()
		}
		return ok
	}
	if got := concurrently(n, tryProbe); got != 1 {
		t.Fatalf("%d probes let through at once, want 1", got)
	}
	// the slow calls end at once, a third of them failures, a third
	// abandoned; meanwhile a cooldown passes and n callers try again
	var wg sync.WaitGroup
	for i := range slow {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch i % 3 {
			case 0:
				b.Done(slow[i], false)
			case 1:
				b.Done(slow[i], true)
			default:
				b.Abandon(slow[i])
			}
		}()
	}
	advance(time.Second)
	extra := concurrently(n, tryProbe)
	wg.Wait()
	extra += concurrently(n, tryProbe)
	if extra != 0 || b.State() != BreakerHalfOpen {
		t.Fatalf("with the probe in flight: %d more let through, state %v; want 0, half-open", extra, b.State())
	}
	b.Done(probe, false)
	if b.State() != BreakerOpen {
		t.Fatalf("state %v after the probe failed, want open", b.State())
	}
	if got := concurrently(n, tryProbe); got != 0 {
		t.Fatalf("%d let through before the cooldown", got)
	}
	advance(time.Second)
	if got := concurrently(n, tryProbe); got != 1 {
		t.Fatalf("%d probes after the cooldown, want 1", got)
	}
	b.Done(probe, true)
	if got := concurrently(n, tryProbe); got != n || b.State() != BreakerClosed {
		t.Fatalf("closed by the probe: %d of %d let through, state %v", got, n, b.State())
	}
}

// concurrently runs f(0..n-1) on n goroutines at once and counts its trues.
func concurrently(n int, f func(int) bool) int {
	var wg sync.WaitGroup
	var got atomic.Int64
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if f(i) {
				got.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	return int(got.Load())
}
