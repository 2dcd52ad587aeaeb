package bucket

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// MaxListed bounds the locks and the multipliers a store indexes for
// listing (the newest are kept).
const MaxListed = 100_000

// LockEntry is a lock in force, for listing.
type LockEntry struct {
	// Subject is what is locked.
	Subject Subject
	Lock    Lock
	// SetAt is when it was set (writing the same lock again keeps it).
	SetAt time.Time
}

// MultiplierEntry is one source's multiplier in force on a subject.
type MultiplierEntry struct {
	// Subject is what the multiplier scales.
	Subject    Subject
	Multiplier Multiplier
	// SetAt is when it was set (writing the same value again keeps it).
	SetAt time.Time
}

// ParseSubjectKey splits a lock, multiplier or trust key
// (prefix + "{subject:escaped id}:x") into its subject and id.
func ParseSubjectKey(key string) (subject, id string, ok bool) {
	i := strings.IndexByte(key, '{')
	j := strings.LastIndexByte(key, '}')
	if i < 0 || j < i {
		return "", "", false
	}
	subject, esc, ok := strings.Cut(key[i+1:j], ":")
	if !ok {
		return "", "", false
	}
	if subject == "attr" { // "attr:NAME:value" (7.4)
		name, rest, found := strings.Cut(esc, ":")
		if !found {
			return "", "", false
		}
		subject, esc = "attr:"+name, rest
	}
	id, err := unescapeID(esc)
	return subject, id, err == nil
}

// unescapeID reverses EscapeID.
func unescapeID(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("bucket: bad escape in %q", s)
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("bucket: bad escape in %q", s)
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), nil
}

// prefixOf returns the key prefix of a subject key (what precedes "{").
func prefixOf(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		return key[:i]
	}
	return key
}

// listGrace is how long a listing leaves an index member whose entry it
// finds missing: a writer of an older build indexes before it writes the
// entry, and a listing must not drop a lock or multiplier being written.
const listGrace = 10 * time.Second

// index records member in the sorted set idx at Redis's TIME and keeps
// idx at MaxListed members; when changed is false (the same entry written
// again) it only adds a missing member, keeping its place in listings.
// Callers write the entry before they index it, so a listing that finds a
// member's entry missing is never racing the write that lists it; each
// write indexes, so an entry a failed index write left out is listed
// again at its next re-assertion.
func (s *RedisStore) index(ctx context.Context, idx, member string, changed bool) error {
	mode := "nx"
	if changed {
		mode = "set"
	}
	if err := indexScript.Run(ctx, s.c, []string{idx}, member, MaxListed, mode).Err(); err != nil {
		return fmt.Errorf("%w: index %s in %s: %w", ErrUnavailable, member, idx, err)
	}
	return nil
}

// prune removes from idx the members a listing found out of force, each
// only if no write listed it again since the listing read it (its score
// is the one read) and it was listed more than listGrace ago (pruneScript).
// It returns how many it removed (0 on a failure: the next listing tries
// again).
func (s *RedisStore) prune(ctx context.Context, idx string, gone []redis.Z) int {
	if len(gone) == 0 {
		return 0
	}
	args := make([]any, 0, 1+2*len(gone))
	args = append(args, listGrace.Milliseconds())
	for _, z := range gone {
		args = append(args, z.Member, strconv.FormatInt(int64(z.Score), 10))
	}
	n, err := pruneScript.Run(ctx, s.c, []string{idx}, args...).Int()
	if err != nil {
		return 0
	}
	return n
}

// unindex removes member from idx (ignoring failures, as index does).
func (s *RedisStore) unindex(ctx context.Context, idx string, members ...string) {
	if len(members) == 0 {
		return
	}
	g := make([]any, len(members))
	for i, m := range members {
		g[i] = m
	}
	pipe := s.c.Pipeline()
	pipe.ZRem(ctx, idx, g...)
	_, _ = pipe.Exec(ctx)
}

// ListLocks implements Admin: the locks under the store's prefix, newest
// first, skipping (and dropping from the index) those no longer in force
// at Redis's TIME, read once.
func (s *RedisStore) ListLocks(ctx context.Context, limit int) ([]LockEntry, error) {
	idx := lockIndex(s.prefix)
	now, err := s.redisNow(ctx, idx)
	if err != nil {
		return nil, err
	}
	var out []LockEntry
	err = s.scanIndex(ctx, idx, limit, func(members []redis.Z) ([]redis.Z, error) {
		pipe := s.c.Pipeline()
		keys := make([]string, len(members))
		cmds := make([]*redis.StringCmd, len(members))
		for i, z := range members {
			keys[i], _ = z.Member.(string)
			cmds[i] = pipe.Get(ctx, keys[i])
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		var gone []redis.Z
		for i, c := range cmds {
			l, ok := parseLock(c.Val())
			subj, id, ok2 := ParseSubjectKey(keys[i])
			if !ok || !ok2 || !l.Until.After(now) {
				gone = append(gone, members[i])
				continue
			}
			l.Own = isRuleLockKey(keys[i])
			if len(out) < limit {
				out = append(out, LockEntry{Subject: Subject{subj, id}, Lock: l, SetAt: time.UnixMilli(int64(members[i].Score))})
			}
		}
		return gone, nil
	}, func() int { return len(out) })
	return out, err
}

// ListMultipliers implements Admin like ListLocks.
func (s *RedisStore) ListMultipliers(ctx context.Context, limit int) ([]MultiplierEntry, error) {
	idx := multIndex(s.prefix)
	now, err := s.redisNow(ctx, idx)
	if err != nil {
		return nil, err
	}
	var out []MultiplierEntry
	err = s.scanIndex(ctx, idx, limit, func(members []redis.Z) ([]redis.Z, error) {
		pipe := s.c.Pipeline()
		cmds := make([]*redis.StringCmd, len(members))
		names := make([]string, len(members))
		for i, z := range members {
			names[i], _ = z.Member.(string)
			key, src, _ := strings.Cut(names[i], "|")
			cmds[i] = pipe.HGet(ctx, key, src)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		var gone []redis.Z
		for i, c := range cmds {
			key, src, _ := strings.Cut(names[i], "|")
			m, ok := parseMultipliers(map[string]string{src: c.Val()})[src]
			subj, id, ok2 := ParseSubjectKey(key)
			if !ok || !ok2 || !m.ExpiresAt.IsZero() && !m.ExpiresAt.After(now) {
				gone = append(gone, members[i])
				continue
			}
			if len(out) < limit {
				out = append(out, MultiplierEntry{Subject: Subject{subj, id}, Multiplier: m, SetAt: time.UnixMilli(int64(members[i].Score))})
			}
		}
		return gone, nil
	}, func() int { return len(out) })
	return out, err
}

// scanIndex walks idx newest first in pages, handing each page to read
// (which returns the members no longer in force, then pruned from idx)
// until have() reaches limit or idx ends. Pages follow the scores (the
// next starts at the last one read, past the members kept at it), not
// positions: an entry written or lifted while a listing runs moves none
// that is not yet read (except one lifted at the very millisecond a page
// ended on, which may move one other of that millisecond past it), and
// each member is handed to read once.
func (s *RedisStore) scanIndex(ctx context.Context, idx string, limit int, read func([]redis.Z) ([]redis.Z, error), have func() int) error {
	const page = 500
	upTo, ties := "+inf", 0
	seen := make(map[string]bool)
	for walked := 0; have() < limit && walked < MaxListed; {
		pipe := s.c.Pipeline()
		zr := pipe.ZRevRangeByScoreWithScores(ctx, idx, &redis.ZRangeBy{Max: upTo, Min: "-inf", Offset: int64(ties), Count: page})
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("%w: list %s: %w", ErrUnavailable, idx, err)
		}
		members := zr.Val()
		if len(members) == 0 {
			return nil
		}
		walked += len(members)
		fresh := make([]redis.Z, 0, len(members))
		for _, m := range members {
			if k, _ := m.Member.(string); !seen[k] {
				seen[k] = true
				fresh = append(fresh, m)
			}
		}
		gone, err := read(fresh)
		if err != nil {
			return fmt.Errorf("%w: list %s: %w", ErrUnavailable, idx, err)
		}
		s.prune(ctx, idx, gone)
		last := members[len(members)-1].Score
		if at := strconv.FormatFloat(last, 'f', -1, 64); at != upTo {
			upTo, ties = at, 0
		}
		ties += atScore(members, last) - atScore(gone, last)
		if len(members) < page {
			return nil
		}
	}
	return nil
}

// atScore counts the members of zs with score.
func atScore(zs []redis.Z, score float64) int {
	n := 0
	for _, z := range zs {
		if z.Score == score {
			n++
		}
	}
	return n
}

// ListLocks implements Admin: the locks in force at the store's clock.
func (s *MemoryStore) ListLocks(_ context.Context, limit int) ([]LockEntry, error) {
	now, prefix := s.now(), s.prefix
	s.mu.RLock()
	var out []LockEntry
	for k, l := range s.locks {
		if prefixOf(k) != prefix {
			continue
		}
		subj, id, ok := ParseSubjectKey(k)
		if ok && l.Until.After(now) {
			out = append(out, LockEntry{Subject: Subject{subj, id}, Lock: l, SetAt: s.setAt[k]})
		}
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		return newer(out[i].SetAt, out[j].SetAt, lockEntryKey(out[i]), lockEntryKey(out[j]))
	})
	return out[:min(len(out), max(limit, 0))], nil
}

// ListMultipliers implements Admin like ListLocks.
func (s *MemoryStore) ListMultipliers(_ context.Context, limit int) ([]MultiplierEntry, error) {
	now, prefix := s.now(), s.prefix
	s.mu.RLock()
	var out []MultiplierEntry
	for k, ms := range s.mults {
		subj, id, ok := ParseSubjectKey(k)
		if !ok || prefixOf(k) != prefix {
			continue
		}
		for src, m := range ms {
			if m.ExpiresAt.IsZero() || m.ExpiresAt.After(now) {
				out = append(out, MultiplierEntry{Subject: Subject{subj, id}, Multiplier: m, SetAt: s.setAt[k+"|"+src]})
			}
		}
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		return newer(out[i].SetAt, out[j].SetAt, entryKey(out[i].Subject, out[i].Multiplier.Source), entryKey(out[j].Subject, out[j].Multiplier.Source))
	})
	return out[:min(len(out), max(limit, 0))], nil
}

// entryKey orders entries of one SetAt: by their key ("|" source).
func entryKey(s Subject, source string) string {
	if source == "" {
		return subjectKey("", s, ":l")
	}
	return subjectKey("", s, ":m") + "|" + source
}

// lockEntryKey orders lock entries of one SetAt: by their key.
func lockEntryKey(e LockEntry) string { return lockKeyOf("", e.Subject, e.Lock) }

// newer orders listings: later SetAt first, then by key.
func newer(a, b time.Time, ka, kb string) bool {
	if !a.Equal(b) {
		return a.After(b)
	}
	return ka < kb
}
