package bucket

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
)

// releaseScript removes the lease ARGV[1] from the concurrency sets KEYS
// (one slot) and returns 1 when it held a slot in force in any of them
// (its score, its expiry in µs, after Redis's TIME), else 0. A key that
// is not a set (a forged lease id naming another key) frees nothing.
var releaseScript = redis.NewScript(`
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local freed = 0
for i = 1, #KEYS do
  local sc = redis.pcall("ZSCORE", KEYS[i], ARGV[1])
  if type(sc) == "string" then
    redis.call("ZREM", KEYS[i], ARGV[1])
    if tonumber(sc) > now then freed = 1 end
  end
end
return freed
`)

// checkRelease validates a release's arguments.
func checkRelease(lease string, keys []string) error {
	if !validLease(lease) {
		return errors.Join(ErrBadRequest, ErrBadLease)
	}
	if len(keys) == 0 || len(keys) > MaxLimits {
		return errors.Join(ErrBadRequest, fmt.Errorf("bucket: a release names 1 to %d keys, not %d", MaxLimits, len(keys)))
	}
	return nil
}

// Release implements Releaser: one script per hash slot (one in all
// outside a Cluster), judged by Redis's clock.
func (s *RedisStore) Release(ctx context.Context, lease string, keys []string) (bool, error) {
	if err := checkRelease(lease, keys); err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	groups := [][]string{keys}
	if s.cluster {
		groups = groups[:0]
		at := map[uint16]int{}
		for _, k := range keys {
			sl := slotOf(k)
			i, ok := at[sl]
			if !ok {
				i = len(groups)
				at[sl] = i
				groups = append(groups, nil)
			}
			groups[i] = append(groups[i], k)
		}
	}
	pipe := s.c.Pipeline()
	cmds := make([]*redis.Cmd, len(groups))
	for i, g := range groups {
		cmds[i] = releaseScript.Eval(ctx, pipe, g, lease)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	freed := false
	for _, c := range cmds {
		n, err := c.Int64()
		if err != nil {
			return false, fmt.Errorf("%w: release: %w", ErrUnavailable, err)
		}
		freed = freed || n == 1
	}
	return freed, nil
}

// Release implements Releaser, judged by the store's clock.
func (s *MemoryStore) Release(_ context.Context, lease string, keys []string) (bool, error) {
	if err := checkRelease(lease, keys); err != nil {
		return false, err
	}
	now := float64(s.now().UnixMicro())
	freed := false
	for _, k := range keys {
		sh := &s.shards[memHash(maphash.String(s.seed, k))%memShards]
		if !s.unshared {
			sh.mu.Lock()
		}
		if set := sh.leases[k]; set != nil {
			if exp, ok := set[lease]; ok {
				delete(set, lease)
				sh.nleases--
				freed = freed || exp > now
			}
			if len(set) == 0 {
				delete(sh.leases, k)
			}
		}
		if !s.unshared {
			sh.mu.Unlock()
		}
	}
	return freed, nil
}

// sweepLeases drops the expired leases of sh (and the sets they empty);
// sh.mu must be held.
func (sh *memShard) sweepLeases(now time.Time) {
	sh.leaseNext = sh.sweepLeasesAt(float64(now.UnixMicro()))
}

// sweepLeasesAt drops the leases of sh expired at us (µs) and returns
// when the first one left expires (+Inf: none); sh.mu must be held.
func (sh *memShard) sweepLeasesAt(us float64) float64 {
	next := math.Inf(1)
	for k, set := range sh.leases {
		for id, exp := range set {
			if exp <= us {
				delete(set, id)
				sh.nleases--
			} else {
				next = math.Min(next, exp)
			}
		}
		if len(set) == 0 {
			delete(sh.leases, k)
		}
	}
	return next
}

var (
	_ Releaser = (*RedisStore)(nil)
	_ Releaser = (*MemoryStore)(nil)
)
