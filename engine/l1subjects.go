package engine

import "time"

// l1Epoch is the origin of the subjects' expiry times: monoNS measures from
// it on the monotonic clock, so a wall clock step does not stretch the TTL.
var l1Epoch = time.Now()

// monoNS returns t as nanoseconds since l1Epoch.
func monoNS(t time.Time) int64 { return int64(t.Sub(l1Epoch)) }

// l1Subject is a subject's effective multiplier as the store read it, for
// these static and unverified inputs. It is kept apart from the denials'
// l1Entry (a fifth of its size): every decision looks its subjects up,
// and most find nothing or a neutral multiplier. The subjects are keyed by
// their keys' 64-bit seeded hashes (the seed is the process's own and
// secret, so no one can choose keys that collide), not by the keys: a
// lookup then compares no key bytes and follows no pointer to them, which
// on keys spread at random were most of its cost. A lookup finds another
// key's entry with a chance of about 1 in 10^14 (100,000 entries held,
// over 2^64 hashes); that decision then uses the other subject's
// multiplier, cached for at most one TTL.
type l1Subject struct {
	until              int64 // monoNS of when it stops holding
	mult, pen          float64
	static, unverified float64
}

// getSubject returns the unexpired multiplier cached for a subject key.
func (c *L1) getSubject(key string, now int64) (l1Subject, bool) {
	h := c.hash(key)
	sh := c.shardOf(h)
	sh.mu.RLock()
	e, ok := sh.subs[h]
	sh.mu.RUnlock()
	if !ok || now >= e.until {
		return l1Subject{}, false
	}
	return e, true
}

// putSubject caches a subject's multiplier, evicting when the shard is
// full (subjects never evict denials or locks).
func (c *L1) putSubject(key string, e l1Subject, now int64) {
	h := c.hash(key)
	sh := c.shardOf(h)
	sh.mu.Lock()
	if len(sh.m)+len(sh.subs) >= c.maxPerShard && !sh.hasSubject(h) {
		sh.evictSubjects(c.maxPerShard-1, now)
		if len(sh.m)+len(sh.subs) >= c.maxPerShard {
			sh.mu.Unlock()
			return
		}
	}
	sh.subs[h] = e
	sh.mu.Unlock()
}

// evictSubjects drops subjects until the shard holds at most limit
// entries: expired ones, and past the first 8 looked at any; sh.mu must
// be held for writing.
func (sh *l1Shard) evictSubjects(limit int, now int64) {
	n := 0
	for k, old := range sh.subs {
		if len(sh.m)+len(sh.subs) <= limit {
			return
		}
		if now >= old.until || n >= 8 {
			delete(sh.subs, k)
		}
		n++
	}
}

// hasSubject reports whether the shard holds the subject whose key hashes
// to h; sh.mu held.
func (sh *l1Shard) hasSubject(h uint64) bool {
	_, ok := sh.subs[h]
	return ok
}
