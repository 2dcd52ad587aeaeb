package engine

import (
	"context"

	"github.com/tollgate-dev/tollgate/bucket"
)

// Wrap returns s behind the cache, for everything that changes the store
// through this limiter (the admin API, the in-process risk engine): a
// write to a subject's multipliers or lock drops what the cache holds
// about it, so this limiter sees the change at once (other limiters within
// the TTL). Decisions pass through unchanged: the engine consults the
// cache itself (Options.L1). A nil cache returns s.
func (c *L1) Wrap(s bucket.Store) bucket.Store {
	if c == nil {
		return s
	}
	return &l1Store{Store: s, c: c}
}

// l1Store is a bucket.Store whose subject-level writes forget their
// subject's cached entries. Trust sets are never cached (a cached lock
// never answers for a proven device), so Trust forgets nothing.
type l1Store struct {
	bucket.Store
	c *L1
}

// forget drops the cached entry of sub's key with suffix m (multipliers)
// or l (lock); it runs after the write whatever its outcome, since a
// failed write may still have landed.
func (s *l1Store) forget(sub bucket.Subject, lock bool) {
	if lock {
		s.c.forget(bucket.LockKey(s.Prefix(), sub.Kind, sub.ID))
		return
	}
	s.c.forget(bucket.MultiplierKey(s.Prefix(), sub.Kind, sub.ID))
}

// SetMultiplier implements bucket.Admin.
func (s *l1Store) SetMultiplier(ctx context.Context, sub bucket.Subject, m bucket.Multiplier) error {
	defer s.forget(sub, false)
	return s.Store.SetMultiplier(ctx, sub, m)
}

// ClearMultiplier implements bucket.Admin.
func (s *l1Store) ClearMultiplier(ctx context.Context, sub bucket.Subject, source string) error {
	defer s.forget(sub, false)
	return s.Store.ClearMultiplier(ctx, sub, source)
}

// SetLock implements bucket.Admin.
func (s *l1Store) SetLock(ctx context.Context, sub bucket.Subject, l bucket.Lock) error {
	if l.Own {
		defer s.c.forget(bucket.RuleLockKey(s.Prefix(), sub.Kind, sub.ID, l.Rule))
	} else {
		defer s.forget(sub, true)
	}
	return s.Store.SetLock(ctx, sub, l)
}

// ClearLock implements bucket.Admin: it forgets the subject's lock key
// and the own key of every rule lock it held.
func (s *l1Store) ClearLock(ctx context.Context, sub bucket.Subject) (bool, error) {
	defer s.forget(sub, true)
	if ls, err := s.Store.Locks(ctx, sub); err == nil {
		for _, l := range ls {
			if l.Own {
				defer s.c.forget(bucket.RuleLockKey(s.Prefix(), sub.Kind, sub.ID, l.Rule))
			}
		}
	}
	return s.Store.ClearLock(ctx, sub)
}

// ClearRuleLock implements bucket.Admin.
func (s *l1Store) ClearRuleLock(ctx context.Context, sub bucket.Subject, rule string) (bool, error) {
	if rule != "" {
		defer s.c.forget(bucket.RuleLockKey(s.Prefix(), sub.Kind, sub.ID, rule))
	} else {
		defer s.forget(sub, true)
	}
	return s.Store.ClearRuleLock(ctx, sub, rule)
}

var _ bucket.Store = (*l1Store)(nil)
