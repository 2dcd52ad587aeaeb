package engine

import (
	"sync"
	"sync/atomic"
	"time"
)

// BreakerState is the state of a Breaker.
type BreakerState int

// Breaker states.
const (
	BreakerClosed BreakerState = iota
	BreakerOpen
	BreakerHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s BreakerState) String() string {
	switch s {
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return "closed"
}

// BreakerOptions configures a Breaker.
type BreakerOptions struct {
	// Failures is the number of consecutive store failures that open the
	// circuit (default 5).
	Failures int
	// Cooldown is how long the circuit stays open before one probe request
	// may try the store again (default 500ms).
	Cooldown time.Duration
}

// Breaker is a circuit breaker over the bucket store: after Failures
// consecutive failures it opens and decisions fail fast (applying their
// failure mode) for Cooldown; then it lets one probe through at a time
// until one succeeds. It is safe for concurrent use.
type Breaker struct {
	failures int
	cooldown time.Duration
	now      func() time.Time
	onChange func(BreakerState)

	// healthy is true while the circuit is closed with no failure counted:
	// Allow and a successful Done then need no lock (the hot path).
	healthy atomic.Bool

	mu       sync.Mutex
	state    BreakerState
	fails    int
	openedAt time.Time
	probing  bool
}

// NewBreaker returns a closed Breaker. now is its clock (time.Now when nil);
// onChange, when set, is called on every state change.
func NewBreaker(o BreakerOptions, now func() time.Time, onChange func(BreakerState)) *Breaker {
	if o.Failures <= 0 {
		o.Failures = 5
	}
	if o.Cooldown <= 0 {
		o.Cooldown = 500 * time.Millisecond
	}
	if now == nil {
		now = time.Now
	}
	b := &Breaker{failures: o.Failures, cooldown: o.Cooldown, now: now, onChange: onChange}
	b.healthy.Store(true)
	return b
}

// Allow reports whether a call may go to the store now. A true answer
// must be followed by Done.
func (b *Breaker) Allow() bool {
	if b.healthy.Load() {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerClosed:
		return true
	case BreakerOpen:
		if b.now().Sub(b.openedAt) < b.cooldown {
			return false
		}
		b.set(BreakerHalfOpen)
		fallthrough
	default: // half-open: one probe at a time
		if b.probing {
			return false
		}
		b.probing = true
		return true
	}
}

// Abandon releases a call that Allow let through whose end says nothing
// about the store (its caller went away first): a half-open breaker's
// probe slot is freed, and nothing else changes.
func (b *Breaker) Abandon() {
	if b.healthy.Load() {
		return
	}
	b.mu.Lock()
	if b.state == BreakerHalfOpen {
		b.probing = false
	}
	b.mu.Unlock()
}

// Done records the outcome of a call that Allow let through.
func (b *Breaker) Done(ok bool) {
	if ok && b.healthy.Load() {
		return
	}
	b.mu.Lock()
	defer func() {
		b.healthy.Store(b.state == BreakerClosed && b.fails == 0)
		b.mu.Unlock()
	}()
	if b.state == BreakerHalfOpen {
		b.probing = false
		if ok {
			b.fails = 0
			b.set(BreakerClosed)
		} else {
			b.openedAt = b.now()
			b.set(BreakerOpen)
		}
		return
	}
	if ok {
		b.fails = 0
		return
	}
	b.fails++
	if b.state == BreakerClosed && b.fails >= b.failures {
		b.openedAt = b.now()
		b.set(BreakerOpen)
	}
}

// State returns the current state.
func (b *Breaker) State() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

// set changes the state; b.mu must be held.
func (b *Breaker) set(s BreakerState) {
	if b.state == s {
		return
	}
	b.state = s
	if b.onChange != nil {
		b.onChange(s)
	}
}
