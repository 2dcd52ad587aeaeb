package bucket_test

import (
	"context"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// TestRedisJudgesExpiryByRedisTime (issue 12 item 4): RedisStore judges
// every expiry by Redis's TIME, so the host's clock is irrelevant. The
// store runs in a synctest bubble, whose clock stands at 2000-01-01 while
// Redis keeps real time: entries that expired an hour ago by Redis's clock
// (and lie 26 years ahead of the host's) are not in force for GetLock,
// ClearLock, Multipliers, the listings or a Cluster-path decision, and
// entries in force by Redis's clock are.
func TestRedisJudgesExpiryByRedisTime(t *testing.T) {
	t.Parallel()
	shared, p := testenv.Redis(t) // the prefix, removed at cleanup
	real, err := shared.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	past, future := real.Add(-time.Hour), real.Add(time.Hour)
	synctest.Test(t, func(t *testing.T) {
		if time.Now().After(real.Add(-24 * time.Hour)) {
			t.Fatalf("the bubble's clock %v is not far behind Redis's %v", time.Now(), real)
		}
		c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
		defer c.Close()
		// Cluster: every multi-slot decision takes the Cluster path
		s := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: 5 * time.Second, Prefix: p, Cluster: true})
		defer s.Close()
		ctx := context.Background()
		stale, live := bucket.Subject{Kind: "account", ID: "stale"}, bucket.Subject{Kind: "account", ID: "live"}
		lock := bucket.Lock{Kind: "lockout", Rule: "r", Until: future}
		for _, sub := range []bucket.Subject{stale, live} {
			if err := s.SetLock(ctx, sub, lock); err != nil {
				t.Fatal(err)
			}
		}
		// the stale lock's value says it ended an hour ago (its key lives on)
		staleKey := bucket.LockKey(p, "account", "stale")
		must(t, c.Set(ctx, staleKey, "lockout "+strconv.FormatInt(past.UnixMicro(), 10)+" - r", redis.KeepTTL).Err())
		dev := bucket.Subject{Kind: "device", ID: "d1"}
		for _, src := range []string{"admin", "velocity"} {
			must(t, s.SetMultiplier(ctx, dev, bucket.Multiplier{Source: src, Value: 0.5, ExpiresAt: future}))
		}
		devKey := bucket.MultiplierKey(p, "device", "d1")
		must(t, c.HSet(ctx, devKey, "velocity", "0.5 "+strconv.FormatInt(past.UnixMicro(), 10)+" r").Err())

		if now, err := s.Now(ctx); err != nil || now.Before(real) || now.After(future) {
			t.Fatalf("Now = %v, %v; want Redis's clock, from %v", now, err, real)
		}
		if _, ok, err := s.GetLock(ctx, stale); err != nil || ok {
			t.Fatalf("GetLock(stale) = %v, %v; want not in force", ok, err)
		}
		if l, ok, err := s.GetLock(ctx, live); err != nil || !ok || !l.Until.Equal(time.UnixMicro(future.UnixMicro())) {
			t.Fatalf("GetLock(live) = %+v %v, %v; want in force", l, ok, err)
		}
		if ms, err := s.Multipliers(ctx, dev); err != nil || len(ms) != 1 || ms[0].Source != "admin" {
			t.Fatalf("Multipliers = %+v, %v; want admin alone", ms, err)
		}
		if locks, err := s.ListLocks(ctx, 10); err != nil || len(locks) != 1 || locks[0].Subject != live {
			t.Fatalf("ListLocks = %+v, %v; want live alone", locks, err)
		}
		// listed as set at Redis's time, not the bubble's
		if ms, err := s.ListMultipliers(ctx, 10); err != nil || len(ms) != 1 || ms[0].Multiplier.Source != "admin" || ms[0].SetAt.Before(past) {
			t.Fatalf("ListMultipliers = %+v, %v; want admin alone, set at Redis's time", ms, err)
		}

		// a decision across slots (Cluster path), at Redis's time: the
		// stale lock does not deny, the live one does
		for _, tc := range []struct {
			sub    bucket.Subject
			locked bool
		}{{stale, false}, {live, true}} {
			req := bucket.Request{Cost: 1, Locks: []string{bucket.LockKey(p, "account", tc.sub.ID)},
				Limits: []bucket.Limit{{Key: p + "{ip:192.0.2.1}:b:x", Burst: 5, Rate: 5, Period: time.Minute}}}
			if bucket.Slot(req.Locks[0]) == bucket.Slot(req.Limits[0].Key) {
				t.Fatal("the lock and the bucket share a slot: not the Cluster path")
			}
			var res bucket.Result
			if err := s.Decide(ctx, &req, &res); err != nil || res.Locked != tc.locked {
				t.Fatalf("decide with the %s lock: locked=%v err=%v, want locked=%v", tc.sub.ID, res.Locked, err, tc.locked)
			}
			if res.Now.Before(real) || res.Now.After(real.Add(time.Minute)) {
				t.Fatalf("decision time %v, want Redis's (%v)", res.Now, real)
			}
		}
		if was, err := s.ClearLock(ctx, stale); err != nil || was {
			t.Fatalf("ClearLock(stale) = %v, %v; want nothing was in force", was, err)
		}
		if was, err := s.ClearLock(ctx, live); err != nil || !was {
			t.Fatalf("ClearLock(live) = %v, %v; want it was in force", was, err)
		}
	})
}

// TestMemoryJudgesExpiryByItsClock: the memory store judges every expiry
// by its injected clock, to the microsecond, whatever the host's.
func TestMemoryJudgesExpiryByItsClock(t *testing.T) {
	t.Parallel()
	now := time.Date(2041, 3, 4, 5, 6, 7, 0, time.UTC) // far from the host's
	s := bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return now }})
	ctx := context.Background()
	a, b := bucket.Subject{Kind: "account", ID: "a"}, bucket.Subject{Kind: "account", ID: "b"}
	must(t, s.SetLock(ctx, a, bucket.Lock{Kind: "lockout", Rule: "r", Until: now.Add(time.Microsecond)}))
	must(t, s.SetLock(ctx, b, bucket.Lock{Kind: "lockout", Rule: "r", Until: now}))
	if got, err := s.Now(ctx); err != nil || !got.Equal(now) {
		t.Fatalf("Now = %v, %v; want the injected clock's %v", got, err, now)
	}
	dev := bucket.Subject{Kind: "device", ID: "d"}
	must(t, s.SetMultiplier(ctx, dev, bucket.Multiplier{Source: "admin", Value: 2, ExpiresAt: now.Add(time.Microsecond)}))
	must(t, s.SetMultiplier(ctx, dev, bucket.Multiplier{Source: "velocity", Value: 0.5, ExpiresAt: now}))
	if _, ok, _ := s.GetLock(ctx, a); !ok {
		t.Fatal("a lock ending 1µs after the store's clock is not in force")
	}
	if _, ok, _ := s.GetLock(ctx, b); ok {
		t.Fatal("a lock ending at the store's clock is in force")
	}
	if ms, _ := s.Multipliers(ctx, dev); len(ms) != 1 || ms[0].Source != "admin" {
		t.Fatalf("Multipliers = %+v, want admin alone", ms)
	}
	if locks, _ := s.ListLocks(ctx, 10); len(locks) != 1 || locks[0].Subject != a {
		t.Fatalf("ListLocks = %+v, want a alone", locks)
	}
	if ms, _ := s.ListMultipliers(ctx, 10); len(ms) != 1 || !ms[0].SetAt.Equal(now) {
		t.Fatalf("ListMultipliers = %+v, want admin set at the store's clock", ms)
	}
	var res bucket.Result
	req := bucket.Request{Cost: 1, Locks: []string{bucket.LockKey(bucket.DefaultPrefix, "account", "a")},
		Limits: []bucket.Limit{{Key: "tg:{ip:1}:b:x", Burst: 1, Rate: 1, Period: time.Minute}}}
	if err := s.Decide(ctx, &req, &res); err != nil || !res.Locked || !res.Now.Equal(now) {
		t.Fatalf("decision at the store's clock: %+v %v", res, err)
	}
	now = now.Add(time.Microsecond)
	if _, ok, _ := s.GetLock(ctx, a); ok {
		t.Fatal("the lock is in force once the store's clock reached its end")
	}
	if was, _ := s.ClearLock(ctx, a); was {
		t.Fatal("ClearLock reported an ended lock as in force")
	}
}

// TestSubjectKinds: a kind that could break a key is refused, by both stores.
func TestSubjectKinds(t *testing.T) {
	t.Parallel()
	c, p := testenv.Redis(t)
	rs := bucket.NewRedisStore(c, bucket.RedisOptions{Prefix: p})
	t.Cleanup(func() { _ = rs.Close() })
	for name, s := range map[string]bucket.Store{"memory": bucket.NewMemoryStore(bucket.MemoryOptions{}), "redis": rs} {
		for _, kind := range []string{"", "ip}", "Account", "a:b"} {
			err := s.SetLock(context.Background(), bucket.Subject{Kind: kind, ID: "x"}, bucket.Lock{Kind: "lockout", Until: time.Now().Add(time.Hour)})
			if !errorsIs(err, bucket.ErrBadRequest) {
				t.Errorf("%s: kind %q: err = %v, want ErrBadRequest", name, kind, err)
			}
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
