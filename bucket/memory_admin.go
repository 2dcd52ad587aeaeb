package bucket

import (
	"context"
	"sort"
	"time"
)

// MemoryStore's subject-level administration: keys are built as
// RedisStore builds them (so decisions find them), and every expiry is
// judged by the injected clock (MemoryOptions.Now).

// Prefix implements Store.
func (s *MemoryStore) Prefix() string { return s.prefix }

// SetMultiplier implements Admin.
func (s *MemoryStore) SetMultiplier(_ context.Context, sub Subject, m Multiplier) error {
	if err := sub.check(); err != nil {
		return err
	}
	key := subjectKey(s.prefix, sub, ":m")
	s.mu.Lock()
	defer s.mu.Unlock()
	ms := s.mults[key]
	if ms == nil {
		if len(s.mults) >= s.maxSubjects {
			s.sweepForRoomLocked(s.now())
			if len(s.mults) >= s.maxSubjects {
				return ErrFull
			}
		}
		ms = make(map[string]Multiplier, 2)
		s.mults[key] = ms
	}
	m.ExpiresAt = truncUS(m.ExpiresAt)
	s.noteExpiryLocked(m.ExpiresAt)
	if old, ok := ms[m.Source]; !ok || old != m {
		s.setAt[key+"|"+m.Source] = s.now()
	}
	ms[m.Source] = m
	return nil
}

// ClearMultiplier implements Admin.
func (s *MemoryStore) ClearMultiplier(_ context.Context, sub Subject, source string) error {
	if err := sub.check(); err != nil {
		return err
	}
	key := subjectKey(s.prefix, sub, ":m")
	s.mu.Lock()
	defer s.mu.Unlock()
	if source == "" {
		for src := range s.mults[key] {
			delete(s.setAt, key+"|"+src)
		}
		delete(s.mults, key)
		return nil
	}
	delete(s.setAt, key+"|"+source)
	if ms := s.mults[key]; ms != nil {
		delete(ms, source)
		if len(ms) == 0 {
			delete(s.mults, key)
		}
	}
	return nil
}

// Multipliers implements Admin: those unexpired at the store's clock.
func (s *MemoryStore) Multipliers(_ context.Context, sub Subject) ([]Multiplier, error) {
	if err := sub.check(); err != nil {
		return nil, err
	}
	key := subjectKey(s.prefix, sub, ":m")
	now := s.now()
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []Multiplier
	for _, m := range s.mults[key] {
		if m.ExpiresAt.IsZero() || m.ExpiresAt.After(now) {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Source < out[j].Source })
	return out, nil
}

// SetLock implements Admin.
func (s *MemoryStore) SetLock(_ context.Context, sub Subject, l Lock) error {
	if err := sub.check(); err != nil {
		return err
	}
	key := lockKeyOf(s.prefix, sub, l)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.locks[key]; !ok && len(s.locks) >= s.maxSubjects {
		s.sweepForRoomLocked(s.now())
		if len(s.locks) >= s.maxSubjects {
			return ErrFull
		}
	}
	l.Until = truncUS(l.Until)
	s.noteExpiryLocked(l.Until)
	if old, ok := s.locks[key]; !ok || old != l {
		s.setAt[key] = s.now()
	}
	s.locks[key] = l
	if l.Own {
		base := subjectKey(s.prefix, sub, ":l")
		rules := s.lockRules[base]
		if rules == nil {
			rules = make(map[string]struct{}, 1)
			s.lockRules[base] = rules
		}
		rules[l.Rule] = struct{}{}
	}
	return nil
}

// ClearLock implements Admin.
func (s *MemoryStore) ClearLock(_ context.Context, sub Subject) (bool, error) {
	if err := sub.check(); err != nil {
		return false, err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	was := false
	for _, key := range s.lockKeysLocked(sub) {
		l, ok := s.locks[key]
		was = was || ok && l.Until.After(now)
		delete(s.locks, key)
		delete(s.setAt, key)
	}
	delete(s.lockRules, subjectKey(s.prefix, sub, ":l"))
	return was, nil
}

// ClearRuleLock implements Admin.
func (s *MemoryStore) ClearRuleLock(_ context.Context, sub Subject, rule string) (bool, error) {
	if err := sub.check(); err != nil {
		return false, err
	}
	key := lockKeyOf(s.prefix, sub, Lock{Rule: rule, Own: rule != ""})
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.locks[key]
	delete(s.locks, key)
	delete(s.setAt, key)
	if rule != "" {
		base := subjectKey(s.prefix, sub, ":l")
		if rules := s.lockRules[base]; rules != nil {
			delete(rules, rule)
			if len(rules) == 0 {
				delete(s.lockRules, base)
			}
		}
	}
	return ok && l.Until.After(now), nil
}

// GetLock implements Admin: the lock in force at the store's clock that
// lasts longest.
func (s *MemoryStore) GetLock(ctx context.Context, sub Subject) (Lock, bool, error) {
	locks, err := s.Locks(ctx, sub)
	if err != nil || len(locks) == 0 {
		return Lock{}, false, err
	}
	return locks[0], true, nil
}

// Locks implements Admin: those in force at the store's clock.
func (s *MemoryStore) Locks(_ context.Context, sub Subject) ([]Lock, error) {
	if err := sub.check(); err != nil {
		return nil, err
	}
	now := s.now()
	s.mu.RLock()
	var out []Lock
	for _, key := range s.lockKeysLocked(sub) {
		if l, ok := s.locks[key]; ok && l.Until.After(now) {
			out = append(out, l)
		}
	}
	s.mu.RUnlock()
	sortLocks(out)
	return out, nil
}

// lockKeysLocked returns the keys of every lock of sub: its lock key,
// then each rule's own. s.mu must be held.
func (s *MemoryStore) lockKeysLocked(sub Subject) []string {
	base := subjectKey(s.prefix, sub, ":l")
	keys := []string{base}
	for r := range s.lockRules[base] {
		keys = append(keys, RuleLockKey(s.prefix, sub.Kind, sub.ID, r))
	}
	return keys
}

// Trust implements Admin.
func (s *MemoryStore) Trust(_ context.Context, sub Subject, device string, until time.Time) error {
	if err := sub.check(); err != nil {
		return err
	}
	key := subjectKey(s.prefix, sub, ":t")
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.trusts[key]
	if set == nil {
		if len(s.trusts) >= s.maxSubjects {
			s.sweepForRoomLocked(s.now())
			if len(s.trusts) >= s.maxSubjects {
				return ErrFull
			}
		}
		set = make(map[string]time.Time, 1)
		s.trusts[key] = set
	}
	old, ok := set[device]
	if !ok {
		by := s.trustedBy[device]
		if by == nil {
			by = make(map[string]struct{}, 1)
			s.trustedBy[device] = by
		}
		by[key] = struct{}{}
	}
	if until.After(old) { // the later end, as the Redis store's ZADD GT
		set[device] = until
		s.noteExpiryLocked(until)
	}
	if len(set) > MaxTrustedDevices {
		s.dropFirstEndingLocked(key, set, s.now())
	}
	return nil
}

// dropFirstEndingLocked drops the trust set key's ended devices and,
// while it holds more than MaxTrustedDevices, the device whose trust ends
// first (of two ending together, the lesser id, as Redis's
// ZREMRANGEBYRANK orders them). s.mu must be held for writing.
func (s *MemoryStore) dropFirstEndingLocked(key string, set map[string]time.Time, now time.Time) {
	for d, until := range set {
		if !until.After(now) {
			s.dropTrustLocked(key, set, d)
		}
	}
	for len(set) > MaxTrustedDevices {
		first := ""
		for d, until := range set {
			if first == "" || until.Before(set[first]) || until.Equal(set[first]) && d < first {
				first = d
			}
		}
		s.dropTrustLocked(key, set, first)
	}
}

// dropTrustLocked takes device out of the trust set key (set) and out of
// the device index, and forgets the set once empty. s.mu must be held for
// writing.
func (s *MemoryStore) dropTrustLocked(key string, set map[string]time.Time, device string) {
	delete(set, device)
	if by := s.trustedBy[device]; by != nil {
		delete(by, key)
		if len(by) == 0 {
			delete(s.trustedBy, device)
		}
	}
	if len(set) == 0 {
		delete(s.trusts, key)
	}
}

// Now implements Admin: the store's injected clock.
func (s *MemoryStore) Now(context.Context) (time.Time, error) { return s.now(), nil }
