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
			s.sweepSubjectsLocked(s.now())
			if len(s.mults) >= s.maxSubjects {
				return ErrFull
			}
		}
		ms = make(map[string]Multiplier, 2)
		s.mults[key] = ms
	}
	m.ExpiresAt = truncUS(m.ExpiresAt)
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
	key := subjectKey(s.prefix, sub, ":l")
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.locks[key]; !ok && len(s.locks) >= s.maxSubjects {
		s.sweepSubjectsLocked(s.now())
		if len(s.locks) >= s.maxSubjects {
			return ErrFull
		}
	}
	l.Until = truncUS(l.Until)
	if old, ok := s.locks[key]; !ok || old != l {
		s.setAt[key] = s.now()
	}
	s.locks[key] = l
	return nil
}

// ClearLock implements Admin.
func (s *MemoryStore) ClearLock(_ context.Context, sub Subject) (bool, error) {
	if err := sub.check(); err != nil {
		return false, err
	}
	key := subjectKey(s.prefix, sub, ":l")
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.locks[key]
	delete(s.locks, key)
	delete(s.setAt, key)
	return ok && l.Until.After(now), nil
}

// GetLock implements Admin: the lock in force at the store's clock.
func (s *MemoryStore) GetLock(_ context.Context, sub Subject) (Lock, bool, error) {
	if err := sub.check(); err != nil {
		return Lock{}, false, err
	}
	key := subjectKey(s.prefix, sub, ":l")
	now := s.now()
	s.mu.RLock()
	defer s.mu.RUnlock()
	l, ok := s.locks[key]
	if !ok || !l.Until.After(now) {
		return Lock{}, false, nil
	}
	return l, true, nil
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
			s.sweepSubjectsLocked(s.now())
			if len(s.trusts) >= s.maxSubjects {
				return ErrFull
			}
		}
		set = make(map[string]time.Time, 1)
		s.trusts[key] = set
	}
	if until.After(set[device]) { // the later end, as the Redis store's ZADD GT
		set[device] = until
	}
	return nil
}

// Now implements Admin: the store's injected clock.
func (s *MemoryStore) Now(context.Context) (time.Time, error) { return s.now(), nil }
