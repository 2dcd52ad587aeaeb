package engine

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
)

// L1Options configures the local L1 cache.
type L1Options struct {
	// MaxEntries bounds the cache (default 100,000 entries; about 10 MB).
	MaxEntries int
	// NoMultipliers turns off the caching of subjects' multipliers (denials
	// and locks are still cached). Caching them saves the store 1 read per
	// subject per decision when keys repeat within TTL, and costs a little
	// limiter CPU when they do not (uniformly random keys).
	NoMultipliers bool
	// TTL is the longest any answer is reused before the store is asked
	// again (default 250ms; 100-500ms is sane): the cache's staleness bound.
	// A lockout lifted or a penalty cleared by the admin API is seen within it.
	TTL time.Duration
}

// L1 is the limiter's local cache in front of the bucket store. It holds
// answers that cannot become more lenient by waiting less than they say:
//
//   - a bucket found empty: every request of the cost it denied is
//     denied locally until the bucket's retry time or TTL, whichever
//     comes first, without a store call, with the store's wait (less the
//     time since) as its retry time, so Retry-After stays exact; another
//     cost asks the store;
//   - a lockout or step-up: reused for TTL (capped at its end);
//   - a subject's effective multiplier: reused for TTL, so the store does
//     not read the subject's multipliers again (a penalty or bonus set or
//     expired elsewhere is seen within TTL).
//
// So a key attacked at full speed costs the store at most one call per
// TTL (or per refill of its bucket) instead of one per request, and the
// store's work per decision shrinks. A decision is never more lenient than
// the policy plus one TTL of staleness (a new penalty, an expired bonus,
// a lifted lockout, tokens another limiter host returned are all seen
// within TTL). It is bounded:
// when full, expired entries are dropped, then arbitrary ones. Safe for
// concurrent use.
type L1 struct {
	maxPerShard int
	ttl         time.Duration
	noSubjects  bool
	// lastDeny is when (Unix ns) a denial or lock was last cached: past
	// it plus ttl none can be in force, and lookups for them are skipped.
	lastDeny atomic.Int64
	seed     maphash.Seed
	shards   [l1Shards]l1Shard
}

const l1Shards = 32

type l1Shard struct {
	mu   sync.RWMutex
	m    map[string]l1Entry
	subs map[uint64]l1Subject // subjects' multipliers by their keys' hashes (l1subjects.go)
}

// l1Entry is a cached denial.
type l1Entry struct {
	until time.Time // local monotonic time it holds until
	cost  float64   // the cost that was denied (smaller costs may pass)
	// retry is when cost tokens are there, as the store said (local time
	// plus its wait): a denial answered from the cache names this wait,
	// not the entry's time to live
	retry time.Time
	// limit numbers for the answer's headers
	burst float64
	reset time.Time
	lock  bucket.Lock // set for a lockout or step-up
	scope string
}

// NewL1 returns an empty cache.
func NewL1(o L1Options) *L1 {
	if o.MaxEntries <= 0 {
		o.MaxEntries = 100_000
	}
	if o.TTL <= 0 {
		o.TTL = 250 * time.Millisecond
	}
	c := &L1{maxPerShard: max(o.MaxEntries/l1Shards, 1), ttl: o.TTL, noSubjects: o.NoMultipliers, seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = make(map[string]l1Entry)
		c.shards[i].subs = make(map[uint64]l1Subject)
	}
	return c
}

func (c *L1) shard(key string) *l1Shard { return c.shardOf(c.hash(key)) }

// hash is key's seeded hash: it picks the shard, and keys the subjects.
func (c *L1) hash(key string) uint64 { return maphash.String(c.seed, key) }

// shardOf is the shard of the keys that hash to h.
func (c *L1) shardOf(h uint64) *l1Shard { return &c.shards[h%l1Shards] }

// get returns the unexpired entry for key.
func (c *L1) get(key string, now time.Time) (l1Entry, bool) {
	sh := c.shard(key)
	sh.mu.RLock()
	e, ok := sh.m[key]
	sh.mu.RUnlock()
	if !ok || !now.Before(e.until) {
		return l1Entry{}, false
	}
	return e, true
}

// denials reports whether a denial or lock may be cached at now.
func (c *L1) denials(now time.Time) bool {
	return now.UnixNano() <= c.lastDeny.Load()+int64(c.ttl)
}

// put stores e at key, evicting when the shard is full.
func (c *L1) put(key string, e l1Entry, now time.Time) {
	if n := now.UnixNano(); n > c.lastDeny.Load() {
		c.lastDeny.Store(n)
	}
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.m[key]; !ok && len(sh.m)+len(sh.subs) >= c.maxPerShard {
		n := 0
		for k, old := range sh.m {
			if !now.Before(old.until) || n >= 8 {
				delete(sh.m, k)
				if len(sh.m)+len(sh.subs) < c.maxPerShard {
					break
				}
			}
			n++
		}
		// denials and locks matter more than multipliers: make room among
		// the subjects when they fill the shard
		sh.evictSubjects(c.maxPerShard-1, now.UnixNano())
	}
	sh.m[key] = e
}

// forget drops the entries of key (a lock or multiplier key), so a change
// made through this limiter (Wrap) is seen at once.
func (c *L1) forget(key string) {
	h := c.hash(key)
	sh := c.shardOf(h)
	sh.mu.Lock()
	delete(sh.m, key)
	delete(sh.subs, h)
	sh.mu.Unlock()
}

// Len returns the number of entries held (expired ones included until
// they are evicted).
func (c *L1) Len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.RLock()
		n += len(sh.m) + len(sh.subs)
		sh.mu.RUnlock()
	}
	return n
}
