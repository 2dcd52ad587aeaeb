package risk

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Lease is a leadership lease in Redis: several riskd instances share one
// stream, and only the holder of the lease acts (consumes, writes,
// delivers), so their verdicts are those of one riskd. A standby takes
// over within one TTL of the holder's death, rebuilding its state by
// replay.
//
// Every request to Redis (an acquisition, a renewal) has a deadline of a
// third of the TTL, kept by the lease itself whatever the client's
// timeouts and retries: a request sent at s that succeeds leaves the lease
// in Redis until at least s+TTL, and the holder acts only until s+2/3 TTL
// (Valid). A holder whose renewal has not succeeded within a third of the
// TTL has stopped acting a third of the TTL before the lease can pass to
// another riskd, even while Redis stalls.
type Lease struct {
	// StopGrace bounds how long Lead keeps the lease for a run that has
	// not returned after Lead's context ended (default DefaultStopGrace):
	// a riskd stuck on its way out does not keep its standby out for
	// ever.
	StopGrace time.Duration

	c     redis.UniversalClient
	key   string
	owner string
	ttl   time.Duration
	// base is the monotonic origin of until; until is the lease's end of
	// action, in nanoseconds since base (0: not held).
	base  time.Time
	until atomic.Int64
}

// DefaultStopGrace is Lease.StopGrace when unset: the daemon's grace for
// the message in flight (5 s) and its alert delivery's stop, with room.
const DefaultStopGrace = 10 * time.Second

// NewLease returns a lease on key held as owner for ttl at a time.
func NewLease(c redis.UniversalClient, key, owner string, ttl time.Duration) *Lease {
	return &Lease{c: c, key: key, owner: owner, ttl: ttl, base: time.Now(), StopGrace: DefaultStopGrace}
}

// acquireScript takes the lease when it is free, or when it is still this
// owner's (a renewal or acquisition the holder gave up on that Redis
// carried out late).
var acquireScript = redis.NewScript(`
local v = redis.call("GET", KEYS[1])
if v == false then
  redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
  return 1
end
if v == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0`)

var renewScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0`)

var releaseScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0`)

// errTimeout is a lease request that did not answer within its deadline.
var errTimeout = errors.New("risk: lease request timed out")

// run runs script on the lease within a third of the TTL: the deadline is
// a timer, not only ctx's, so neither the client's read timeout nor its
// retries can extend it. The request goes on in the background when it
// times out (Redis may still carry it out: acquireScript accepts that).
func (l *Lease) run(ctx context.Context, script *redis.Script) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, l.ttl/3)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		n, err := script.Run(ctx, l.c, []string{l.key}, l.owner, l.ttl.Milliseconds()).Int()
		if err == nil && n != 1 {
			err = ErrLeaseLost
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err == nil, err
	case <-ctx.Done():
		return false, errTimeout
	}
}

// Valid reports whether the holder may act now: the lease was acquired or
// last renewed by a request sent less than two thirds of the TTL ago.
// Every write, delivery and acknowledgement of the leader checks it
// first; it turns false by itself, without waiting for Hold to notice.
func (l *Lease) Valid() bool {
	u := l.until.Load()
	return u != 0 && int64(time.Since(l.base)) < u
}

// Until returns when the holder's time to act ends (Valid turns false
// then, unless a renewal moves it on), zero when the lease is not held.
// The daemon gives its store writes a context that ends then
// (Options.LeadingUntil): a write that has not left by then, a leader
// paused between asking Valid and writing, a client's retry of a write
// that timed out, is never sent.
func (l *Lease) Until() time.Time {
	u := l.until.Load()
	if u == 0 {
		return time.Time{}
	}
	return l.base.Add(time.Duration(u))
}

// held records a successful request sent at sent (since base).
func (l *Lease) held(sent time.Duration) {
	l.until.Store(int64(sent + l.ttl*2/3))
}

// Acquire blocks until the lease is held or ctx ends (then it returns
// ctx's error), trying every poll. A Redis that cannot be reached is
// tried again at the next poll: a standby waits out an outage.
func (l *Lease) Acquire(ctx context.Context, poll time.Duration) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		sent := time.Since(l.base)
		if ok, _ := l.run(ctx, acquireScript); ok {
			l.held(sent)
			return nil
		}
		t.Reset(poll)
	}
}

// ErrLeaseLost is returned by Hold and Lead when the lease was lost.
var ErrLeaseLost = errors.New("risk: leadership lease lost")

// Hold renews the lease every ttl/3 until ctx ends (then releases it) or
// a renewal fails or does not answer within ttl/3 (then it returns an
// error wrapping ErrLeaseLost: Valid is false already, stop acting).
func (l *Lease) Hold(ctx context.Context) error {
	t := time.NewTicker(l.ttl / 3)
	defer t.Stop()
	defer l.until.Store(0)
	for {
		select {
		case <-ctx.Done():
			l.until.Store(0) // not valid from before the release on
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = releaseScript.Run(rctx, l.c, []string{l.key}, l.owner).Err()
			cancel()
			return nil
		case <-t.C:
			sent := time.Since(l.base)
			if _, err := l.run(ctx, renewScript); err != nil {
				if ctx.Err() != nil {
					continue
				}
				l.until.Store(0)
				if errors.Is(err, ErrLeaseLost) {
					return ErrLeaseLost
				}
				return errors.Join(ErrLeaseLost, err)
			}
			l.held(sent)
		}
	}
}

// Lead runs run while the lease, acquired, is held, renewing it
// meanwhile (Hold). run's context ends when ctx ends or when the lease is
// lost (Valid is false already). When ctx ends the lease stays held, and
// renewed, until run has returned, and is released only then: what run
// still finishes after its context ended (a message in flight) it does as
// the leader, and no other holder can act before it has stopped. A run
// that has not returned StopGrace after ctx ended loses the lease all
// the same (Valid turns false, then the lease is released). Lead returns
// run's error, else one wrapping ErrLeaseLost when the lease was lost,
// else nil.
func (l *Lease) Lead(ctx context.Context, run func(ctx context.Context) error) error {
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	// Hold ends (and releases) only when told: once run has returned, or
	// StopGrace after ctx ended
	hctx, release := context.WithCancel(context.WithoutCancel(ctx))
	defer release()
	grace := l.StopGrace
	if grace <= 0 {
		grace = DefaultStopGrace
	}
	defer context.AfterFunc(ctx, func() { time.AfterFunc(grace, release) })()
	held := make(chan error, 1)
	go func() { held <- l.Hold(hctx) }()
	ran := make(chan error, 1)
	go func() { ran <- run(rctx) }()
	select {
	case lost := <-held: // lost (Valid is false), or released after the grace
		stop()
		if err := <-ran; err != nil {
			return err
		}
		return lost
	case err := <-ran:
		release()
		<-held
		return err
	}
}
