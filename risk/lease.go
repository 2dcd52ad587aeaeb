package risk

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Lease is a leadership lease in Redis: several riskd instances share one
// stream, and only the holder of the lease consumes, so their verdicts are
// those of one riskd. A standby takes over within one TTL of the holder's
// death, rebuilding its state by replay.
type Lease struct {
	c     redis.UniversalClient
	key   string
	owner string
	ttl   time.Duration
}

// NewLease returns a lease on key held as owner for ttl at a time.
func NewLease(c redis.UniversalClient, key, owner string, ttl time.Duration) *Lease {
	return &Lease{c: c, key: key, owner: owner, ttl: ttl}
}

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
		ok, err := l.c.SetNX(ctx, l.key, l.owner, l.ttl).Result()
		if err == nil && ok {
			return nil
		}
		t.Reset(poll)
	}
}

// errLost is returned by Hold when the lease was lost.
var errLost = errors.New("risk: leadership lease lost")

// Hold renews the lease every ttl/3 until ctx ends (then releases it) or
// a renewal fails (then it returns errLost: stop consuming at once).
func (l *Lease) Hold(ctx context.Context) error {
	t := time.NewTicker(l.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = releaseScript.Run(rctx, l.c, []string{l.key}, l.owner).Err()
			cancel()
			return nil
		case <-t.C:
			n, err := renewScript.Run(ctx, l.c, []string{l.key}, l.owner, l.ttl.Milliseconds()).Int()
			if err != nil || n != 1 {
				if ctx.Err() != nil {
					continue
				}
				return errLost
			}
		}
	}
}
