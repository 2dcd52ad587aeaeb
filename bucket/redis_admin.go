package bucket

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisStore's subject-level administration. Every expiry is judged by
// Redis's TIME (read by the same script as the data, on the node that
// holds it), never by the host's clock: limiter hosts, riskd and the
// decide script agree on what is in force.

// Prefix implements Store.
func (s *RedisStore) Prefix() string { return s.prefix }

// SetMultiplier implements Admin.
func (s *RedisStore) SetMultiplier(ctx context.Context, sub Subject, m Multiplier) error {
	if err := sub.check(); err != nil {
		return err
	}
	return s.setMultiplierAt(ctx, subjectKey(s.prefix, sub, ":m"), m)
}

// setMultiplierAt sets m on the multiplier hash key.
func (s *RedisStore) setMultiplierAt(ctx context.Context, key string, m Multiplier) error {
	v := ftoa(m.Value) + " " + strconv.FormatInt(int64(expUS(m.ExpiresAt)), 10) + " " + m.Reason
	pipe := s.c.Pipeline()
	pc := pipe.HGet(ctx, key, m.Source)
	_, err := pipe.Exec(ctx)
	prev := pc.Val()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("%w: set multiplier %s on %s: %w", ErrUnavailable, m.Source, key, err)
	}
	if err := setMultiplierScript.Run(ctx, s.c, []string{key, key + summarySuffix}, m.Source, v).Err(); err != nil {
		return fmt.Errorf("%w: set multiplier %s on %s: %w", ErrUnavailable, m.Source, key, err)
	}
	// after the value: a listing never drops a multiplier being written
	return s.index(ctx, multIndex(prefixOf(key)), key+"|"+m.Source, prev != v)
}

// ClearMultiplier implements Admin.
func (s *RedisStore) ClearMultiplier(ctx context.Context, sub Subject, source string) error {
	if err := sub.check(); err != nil {
		return err
	}
	return s.clearMultiplierAt(ctx, subjectKey(s.prefix, sub, ":m"), source)
}

// clearMultiplierAt clears source ("" all) on the multiplier hash key.
func (s *RedisStore) clearMultiplierAt(ctx context.Context, key, source string) error {
	var err error
	if source == "" {
		err = s.c.Del(ctx, key, key+summarySuffix).Err()
	} else {
		err = clearMultiplierScript.Run(ctx, s.c, []string{key, key + summarySuffix}, source).Err()
	}
	if err != nil {
		return fmt.Errorf("%w: clear multiplier on %s: %w", ErrUnavailable, key, err)
	}
	if source != "" {
		s.unindex(ctx, multIndex(prefixOf(key)), key+"|"+source)
	} // all sources: the listing drops them when it meets them
	return nil
}

// Multipliers implements Admin: those unexpired at Redis's TIME.
func (s *RedisStore) Multipliers(ctx context.Context, sub Subject) ([]Multiplier, error) {
	if err := sub.check(); err != nil {
		return nil, err
	}
	key := subjectKey(s.prefix, sub, ":m")
	v, err := multipliersScript.Run(ctx, s.c, []string{key}).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: read multipliers of %s: %w", ErrUnavailable, key, err)
	}
	now, rest, err := timedReply(v, 3)
	if err != nil {
		return nil, fmt.Errorf("%w: read multipliers of %s: %w", ErrUnavailable, key, err)
	}
	flat, _ := rest[0].([]interface{})
	h := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		f, _ := flat[i].(string)
		h[f], _ = flat[i+1].(string)
	}
	out := make([]Multiplier, 0, len(h))
	for _, m := range parseMultipliers(h) {
		if m.ExpiresAt.IsZero() || m.ExpiresAt.After(now) {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Source < out[j].Source })
	return out, nil
}

// SetLock implements Admin.
func (s *RedisStore) SetLock(ctx context.Context, sub Subject, l Lock) error {
	if err := sub.check(); err != nil {
		return err
	}
	if l.Own {
		return s.setLockAt(ctx, RuleLockKey(s.prefix, sub.Kind, sub.ID, l.Rule), subjectKey(s.prefix, sub, lockRulesSuffix), l)
	}
	return s.setLockAt(ctx, subjectKey(s.prefix, sub, ":l"), "", l)
}

// setLockAt writes l at the lock key, then lists it; Redis expires it
// (PXAT, its own clock) just after l.Until. A rule's own lock (rules, the
// key of the subject's rule set, not "") also enters the set, which is
// how ClearLock and Locks find it.
func (s *RedisStore) setLockAt(ctx context.Context, key, rules string, l Lock) error {
	flags := "-"
	if l.Exempt {
		flags = "x"
	}
	v := l.Kind + " " + strconv.FormatInt(l.Until.UnixMicro(), 10) + " " + flags + " " + l.Rule
	exp := l.Until.Add(time.Millisecond).UnixMilli()
	var prev string
	var err error
	if rules == "" {
		prev, err = setLockScript.Run(ctx, s.c, []string{key}, v, exp).Text()
	} else {
		prev, err = setRuleLockScript.Run(ctx, s.c, []string{key, rules}, v, exp, l.Rule).Text()
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("%w: set lock %s: %w", ErrUnavailable, key, err)
	}
	// after the value: a listing never drops a lock being written; a
	// re-assertion of the same lock keeps its place in listings
	return s.index(ctx, lockIndex(prefixOf(key)), key, prev != v)
}

// ClearLock implements Admin: it reads and deletes the subject's locks in
// one script, judging "in force" by Redis's TIME.
func (s *RedisStore) ClearLock(ctx context.Context, sub Subject) (bool, error) {
	if err := sub.check(); err != nil {
		return false, err
	}
	locks, err := s.locks(ctx, sub, true)
	return len(locks) > 0, err
}

// ClearRuleLock implements Admin.
func (s *RedisStore) ClearRuleLock(ctx context.Context, sub Subject, rule string) (bool, error) {
	if err := sub.check(); err != nil {
		return false, err
	}
	if rule == "" {
		key := subjectKey(s.prefix, sub, ":l")
		_, ok, err := s.lockAt(ctx, key, true)
		if err != nil {
			return false, err
		}
		s.unindex(ctx, lockIndex(s.prefix), key)
		return ok, nil
	}
	key := RuleLockKey(s.prefix, sub.Kind, sub.ID, rule)
	_, ok, err := s.lockAt(ctx, key, true)
	if err != nil {
		return false, err
	}
	pipe := s.c.Pipeline()
	pipe.SRem(ctx, subjectKey(s.prefix, sub, lockRulesSuffix), rule)
	_, _ = pipe.Exec(ctx) // a stale member names a missing key: harmless
	s.unindex(ctx, lockIndex(s.prefix), key)
	return ok, nil
}

// GetLock implements Admin: the lock in force at Redis's TIME that lasts
// longest.
func (s *RedisStore) GetLock(ctx context.Context, sub Subject) (Lock, bool, error) {
	if err := sub.check(); err != nil {
		return Lock{}, false, err
	}
	locks, err := s.locks(ctx, sub, false)
	if err != nil || len(locks) == 0 {
		return Lock{}, false, err
	}
	return locks[0], true, nil
}

// Locks implements Admin: those in force at Redis's TIME.
func (s *RedisStore) Locks(ctx context.Context, sub Subject) ([]Lock, error) {
	if err := sub.check(); err != nil {
		return nil, err
	}
	return s.locks(ctx, sub, false)
}

// locks reads (and when del is set, deletes) every lock of sub: the
// subject's lock key and the own key of each rule in its rule set, all in
// the subject's slot. It returns those in force, sorted by sortLocks.
func (s *RedisStore) locks(ctx context.Context, sub Subject, del bool) ([]Lock, error) {
	set := subjectKey(s.prefix, sub, lockRulesSuffix)
	pipe := s.c.Pipeline()
	sm := pipe.SMembers(ctx, set)
	_, err := pipe.Exec(ctx)
	rules := sm.Val()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("%w: read lock rules %s: %w", ErrUnavailable, set, err)
	}
	sort.Strings(rules)
	keys := make([]string, 0, len(rules)+2)
	keys = append(keys, subjectKey(s.prefix, sub, ":l"))
	for _, r := range rules {
		keys = append(keys, RuleLockKey(s.prefix, sub.Kind, sub.ID, r))
	}
	n := len(keys)
	flag := "0"
	if del {
		flag = "1"
		keys = append(keys, set)
	}
	v, err := getLocksScript.Run(ctx, s.c, keys, flag, n).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: read locks of %s: %w", ErrUnavailable, keys[0], err)
	}
	now, rest, err := timedReply(v, n+2)
	if err != nil {
		return nil, fmt.Errorf("%w: read locks of %s: %w", ErrUnavailable, keys[0], err)
	}
	var out []Lock
	for i, r := range rest {
		val, _ := r.(string)
		l, ok := parseLock(val)
		if !ok || !l.Until.After(now) {
			continue
		}
		l.Own = i > 0
		out = append(out, l)
	}
	if del {
		s.unindex(ctx, lockIndex(s.prefix), keys[:n]...)
	}
	sortLocks(out)
	return out, nil
}

// sortLocks orders a subject's locks: the longest lasting first, then by
// rule, the subject's lock key before a rule's own.
func sortLocks(ls []Lock) {
	sort.Slice(ls, func(i, j int) bool {
		a, b := ls[i], ls[j]
		if !a.Until.Equal(b.Until) {
			return a.Until.After(b.Until)
		}
		if a.Own != b.Own {
			return !a.Own
		}
		return a.Rule < b.Rule
	})
}

// lockAt reads (and when del is set, deletes) the lock at key and reports
// whether it is in force at Redis's TIME.
func (s *RedisStore) lockAt(ctx context.Context, key string, del bool) (Lock, bool, error) {
	flag := "0"
	if del {
		flag = "1"
	}
	v, err := getLockScript.Run(ctx, s.c, []string{key}, flag).Result()
	if err != nil {
		return Lock{}, false, fmt.Errorf("%w: read lock %s: %w", ErrUnavailable, key, err)
	}
	now, rest, err := timedReply(v, 3)
	if err != nil {
		return Lock{}, false, fmt.Errorf("%w: read lock %s: %w", ErrUnavailable, key, err)
	}
	val, _ := rest[0].(string)
	l, ok := parseLock(val)
	if !ok || !l.Until.After(now) {
		return Lock{}, false, nil
	}
	l.Own = isRuleLockKey(key)
	return l, true, nil
}

// Trust implements Admin; the trust set lives until its latest member's
// end by Redis's TIME (trustScript).
func (s *RedisStore) Trust(ctx context.Context, sub Subject, device string, until time.Time) error {
	if err := sub.check(); err != nil {
		return err
	}
	key := subjectKey(s.prefix, sub, ":t")
	if err := trustScript.Run(ctx, s.c, []string{key}, device, until.UnixMicro(), MaxTrustedDevices).Err(); err != nil {
		return fmt.Errorf("%w: trust %s: %w", ErrUnavailable, key, err)
	}
	if sub.Kind != "account" {
		return nil
	}
	// the index of the accounts that trust the device (trust.go), with
	// the same end: UntrustDevice finds the account without a scan
	ik := trustIndexKey(s.prefix, device)
	if err := trustScript.Run(ctx, s.c, []string{ik}, sub.ID, until.UnixMicro(), 0).Err(); err != nil {
		return fmt.Errorf("%w: trust %s: %w", ErrUnavailable, ik, err)
	}
	return nil
}

// trustScript adds a device to a trust set until its end, the later of
// its ends when it is there already, drops the members that have ended,
// and keeps the set alive until its latest member's end. The set is a
// sorted set scored by each device's end in µs, so each device's trust
// ends on its own (as the memory store's); a plain set of an older
// version is turned into one, its members ending when the set would
// have. A set over ARGV[3] members (0: no bound) loses those ending
// first (MaxTrustedDevices). KEYS[1] set; ARGV[1] device; ARGV[2] until
// (µs); ARGV[3] the bound.
var trustScript = redis.NewScript(`
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if redis.call("TYPE", KEYS[1]).ok == "set" then
  local ttl = redis.call("PTTL", KEYS[1])
  local members = redis.call("SMEMBERS", KEYS[1])
  redis.call("DEL", KEYS[1])
  for _, m in ipairs(members) do
    if ttl > 0 then redis.call("ZADD", KEYS[1], now + ttl * 1000, m) end
  end
end
redis.call("ZADD", KEYS[1], "GT", ARGV[2], ARGV[1])
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
local bound = tonumber(ARGV[3]) or 0
if bound > 0 then
  local n = redis.call("ZCARD", KEYS[1])
  if n > bound then redis.call("ZREMRANGEBYRANK", KEYS[1], 0, n - bound - 1) end
end
local last = redis.call("ZRANGE", KEYS[1], -1, -1, "WITHSCORES")
if #last == 0 then return 0 end
redis.call("PEXPIRE", KEYS[1], math.ceil((tonumber(last[2]) - now) / 1000))
return 1`)

// redisNow reads Redis's TIME on the node that holds key.
func (s *RedisStore) redisNow(ctx context.Context, key string) (time.Time, error) {
	v, err := timeScript.Run(ctx, s.c, []string{key}).Result()
	if err == nil {
		var now time.Time
		now, _, err = timedReply(v, 2)
		if err == nil {
			return now, nil
		}
	}
	return time.Time{}, fmt.Errorf("%w: read time: %w", ErrUnavailable, err)
}

// timedReply splits a script reply {TIME seconds, TIME µs, rest...} of n
// entries into the time and the rest, checking its shape.
func timedReply(v interface{}, n int) (time.Time, []interface{}, error) {
	vals, ok := v.([]interface{})
	if !ok || len(vals) != n {
		return time.Time{}, nil, fmt.Errorf("bucket: unexpected reply %T of %d entries", v, len(vals))
	}
	return redisTime(vals[0], vals[1], vals[2:])
}

// redisTime parses TIME's two strings (seconds, microseconds).
func redisTime(sec, usec interface{}, rest []interface{}) (time.Time, []interface{}, error) {
	ss, _ := sec.(string)
	us, _ := usec.(string)
	a, err1 := strconv.ParseInt(ss, 10, 64)
	b, err2 := strconv.ParseInt(us, 10, 64)
	if err1 != nil || err2 != nil {
		return time.Time{}, nil, fmt.Errorf("bucket: unexpected time %v %v", sec, usec)
	}
	return time.UnixMicro(a*1_000_000 + b), rest, nil
}

// Now implements Admin: Redis TIME, one round trip (on a Cluster, from
// the node of the lock index, as the listings read it).
func (s *RedisStore) Now(ctx context.Context) (time.Time, error) {
	return s.redisNow(ctx, lockIndex(s.prefix))
}
