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
// until one succeeds. Only the probe's result decides a half-open
// circuit: a call let through before (while closed) that ends later is
// stale, and its result changes nothing. It is safe for concurrent use.
type Breaker struct {
	failures int
	cooldown time.Duration
	now      func() time.Time
	onChange func(BreakerState)

	// word is the generation (see gen) shifted left by one, its low bit
	// set while the circuit is closed with no failure counted: Allow and a
	// successful Done then need no lock (the hot path).
	word atomic.Uint64

	mu    sync.Mutex
	state BreakerState
	// gen counts the state changes: a call's result counts only in the
	// state it was let through in.
	gen      uint64
	fails    int
	openedAt time.Time
	probing  bool
}

// BreakerCall is a call Allow let through, handed back to Done or Abandon.
type BreakerCall struct {
	gen   uint64
	probe bool
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
	b.publish()
	return b
}

// Allow reports whether a call may go to the store now. A call let
// through (true) must be handed to Done or Abandon.
func (b *Breaker) Allow() (BreakerCall, bool) {
	if w := b.word.Load(); w&1 == 1 {
		return BreakerCall{gen: w >> 1}, true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerClosed:
		return BreakerCall{gen: b.gen}, true
	case BreakerOpen:
		if b.now().Sub(b.openedAt) < b.cooldown {
			return BreakerCall{}, false
		}
		b.set(BreakerHalfOpen)
		fallthrough
	default: // half-open: one probe at a time
		if b.probing {
			return BreakerCall{}, false
		}
		b.probing = true
		return BreakerCall{gen: b.gen, probe: true}, true
	}
}

// Abandon releases a call that Allow let through whose end says nothing
// about the store (its caller went away first): a half-open breaker's
// probe slot is freed, and nothing else changes.
func (b *Breaker) Abandon(c BreakerCall) {
	if !c.probe {
		return
	}
	b.mu.Lock()
	if c.gen == b.gen {
		b.probing = false
	}
	b.mu.Unlock()
}

// Done records the outcome of a call that Allow let through. The result
// of a call let through in an earlier state (before the circuit opened,
// or the probe of an earlier half-open state) is stale: it changes
// nothing.
func (b *Breaker) Done(c BreakerCall, ok bool) {
	if ok {
		if w := b.word.Load(); w&1 == 1 && w>>1 == c.gen {
			return
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.gen != b.gen {
		return
	}
	if c.probe { // the state is half-open: its generation is c's
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
	} else if b.fails++; b.fails >= b.failures {
		b.openedAt = b.now()
		b.set(BreakerOpen)
	}
	b.publish()
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
	b.gen++
	b.publish()
	if b.onChange != nil {
		b.onChange(s)
	}
}

// publish stores the generation and whether the circuit is healthy in
// b.word; b.mu must be held (or b not yet shared).
func (b *Breaker) publish() {
	w := b.gen << 1
	if b.state == BreakerClosed && b.fails == 0 {
		w |= 1
	}
	b.word.Store(w)
}
