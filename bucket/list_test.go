package bucket_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// TestListNewestFirst (6.5): both stores list locks and multipliers in
// force newest first, at most limit; writing the same value again keeps
// its place; cleared and expired entries are not listed; keys of another
// prefix are not listed.
func TestListNewestFirst(t *testing.T) {
	t.Parallel()
	c, p := testenv.Redis(t)
	rs := bucket.NewRedisStore(c, bucket.RedisOptions{Prefix: p})
	other := bucket.NewRedisStore(c, bucket.RedisOptions{Prefix: p + "x:"})
	t.Cleanup(func() { _ = rs.Close(); _ = other.Close() })
	clock := time.Now()
	ms := bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return clock }, Prefix: p})
	stores := map[string][2]bucket.Store{
		"memory": {ms, bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return clock }, Prefix: p + "x:"})},
		"redis":  {rs, other},
	}
	account := func(id string) bucket.Subject { return bucket.Subject{Kind: "account", ID: id} }
	ip := func(id string) bucket.Subject { return bucket.Subject{Kind: "ip", ID: id} }
	for name, pair := range stores {
		t.Run(name, func(t *testing.T) {
			s := pair[0]
			ctx := context.Background()
			until := time.Now().Add(time.Hour)
			for i, acct := range []string{"a:1", "b", "c"} {
				if err := s.SetLock(ctx, account(acct), bucket.Lock{Kind: "lockout", Rule: "r", Until: until}); err != nil {
					t.Fatal(err)
				}
				m := bucket.Multiplier{Source: "admin", Value: float64(i) / 10, ExpiresAt: until, Reason: "why"}
				if err := s.SetMultiplier(ctx, ip(fmt.Sprint("192.0.2.", i)), m); err != nil {
					t.Fatal(err)
				}
				clock = clock.Add(time.Second)
				time.Sleep(5 * time.Millisecond) // Redis scores are in ms
			}
			// re-asserting "a:1" keeps it oldest; another prefix is not listed
			_ = s.SetLock(ctx, account("a:1"), bucket.Lock{Kind: "lockout", Rule: "r", Until: until})
			_ = pair[1].SetLock(ctx, account("other"), bucket.Lock{Kind: "lockout", Rule: "r", Until: until})
			if _, err := s.ClearLock(ctx, account("b")); err != nil {
				t.Fatal(err)
			}
			locks, err := s.ListLocks(ctx, 100)
			if err != nil || len(locks) != 2 || locks[0].Subject.ID != "c" || locks[1].Subject.ID != "a:1" || locks[1].Subject.Kind != "account" || locks[0].Lock.Rule != "r" {
				t.Fatalf("locks = %+v, %v", locks, err)
			}
			if one, _ := s.ListLocks(ctx, 1); len(one) != 1 || one[0].Subject.ID != "c" {
				t.Fatalf("limit 1: %+v", one)
			}
			mults, err := s.ListMultipliers(ctx, 2)
			if err != nil || len(mults) != 2 || mults[0].Subject.ID != "192.0.2.2" || mults[1].Subject.ID != "192.0.2.1" || mults[0].Multiplier.Value != 0.2 || mults[0].Subject.Kind != "ip" {
				t.Fatalf("multipliers = %+v, %v", mults, err)
			}
			_ = s.ClearMultiplier(ctx, ip("192.0.2.2"), "admin")
			if mults, _ := s.ListMultipliers(ctx, 100); len(mults) != 2 || mults[0].Subject.ID != "192.0.2.1" {
				t.Fatalf("after clear: %+v", mults)
			}
		})
	}
}

func TestParseSubjectKey(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"alice", "a:b|c{d}%", "x y", ""} {
		subj, got, ok := bucket.ParseSubjectKey(bucket.LockKey("tg:", "account", id))
		if !ok || subj != "account" || got != id {
			t.Errorf("%q: %q %q %v", id, subj, got, ok)
		}
	}
	if _, _, ok := bucket.ParseSubjectKey("tg:nobraces"); ok {
		t.Error("a key without a subject parsed")
	}
}
