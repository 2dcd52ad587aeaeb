package bucket_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// trustEnds checks that each trusted device's trust ends on its own: a
// device enrolled for an hour is not kept trusted by one enrolled later
// for longer (the Redis store once kept the whole set alive until its
// latest member's end), and enrolling again never shortens a trust. The
// exempt lock is judged at each time for d-short and d-long, in one slot
// (the script) or across slots (Cluster's read), as the memory store does.
func trustEnds(t *testing.T, s bucket.Store, p string) {
	t.Helper()
	ctx := context.Background()
	alice := bucket.Subject{Kind: "account", ID: "alice"}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.SetLock(ctx, alice, bucket.Lock{Kind: "lockout", Rule: "r", Until: t0.Add(48 * time.Hour), Exempt: true}))
	must(s.Trust(ctx, alice, "d-short", t0.Add(time.Hour)))
	must(s.Trust(ctx, alice, "d-long", t0.Add(30*time.Hour)))
	must(s.Trust(ctx, alice, "d-long", t0.Add(2*time.Hour))) // never shortens
	req := bucket.Request{Cost: 1, Locks: []string{bucket.LockKey(p, "account", "alice")}, TrustKeys: []string{bucket.TrustKey(p, "account", "alice")},
		Limits: []bucket.Limit{{Key: p + "{ip:192.0.2.1}:b:l", Burst: 100, Rate: 100, Period: time.Minute}}}
	var res bucket.Result
	for _, tc := range []struct {
		at     time.Duration
		device string
		locked bool
	}{
		{30 * time.Minute, "d-short", false}, {30 * time.Minute, "d-long", false},
		{90 * time.Minute, "d-short", true}, {90 * time.Minute, "d-long", false},
		{29 * time.Hour, "d-long", false}, {31 * time.Hour, "d-long", true},
	} {
		req.Now, req.Device = t0.Add(tc.at), tc.device
		if err := s.Decide(ctx, &req, &res); err != nil || res.Locked != tc.locked {
			t.Errorf("at t0+%v device %s: locked=%v err=%v, want locked=%v", tc.at, tc.device, res.Locked, err, tc.locked)
		}
	}
}

func TestTrustEndsPerDevice(t *testing.T) {
	t.Parallel()
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s, p := sc.new(t)
			trustEnds(t, s, p)
		})
	}
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		s := clusterStore(t)
		trustEnds(t, s, s.(*bucket.RedisStore).Prefix())
	})
}

// TestTrustSetOfAnOlderVersion: during an upgrade the trust sets written
// by an older version (plain sets that live until their latest member's
// end) are still read, and the next enrolment turns one into per-device
// ends, its old members ending when the set would have.
func TestTrustSetOfAnOlderVersion(t *testing.T) {
	t.Parallel()
	c, p := testenv.Redis(t)
	s := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: 5 * time.Second, ExpirySlack: 2 * time.Hour, Prefix: p})
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	alice := bucket.Subject{Kind: "account", ID: "alice"}
	tk := bucket.TrustKey(p, "account", "alice")
	if err := c.SAdd(ctx, tk, "d-old").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Expire(ctx, tk, 3*time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLock(ctx, alice, bucket.Lock{Kind: "lockout", Rule: "r", Until: t0.Add(48 * time.Hour), Exempt: true}); err != nil {
		t.Fatal(err)
	}
	req := bucket.Request{Now: t0, Cost: 1, Device: "d-old", Locks: []string{bucket.LockKey(p, "account", "alice")}, TrustKeys: []string{tk},
		Limits: []bucket.Limit{{Key: p + "{ip:192.0.2.1}:b:l", Burst: 100, Rate: 100, Period: time.Minute}}}
	var res bucket.Result
	if err := s.Decide(ctx, &req, &res); err != nil || res.Locked {
		t.Fatalf("old set's member: locked=%v err=%v", res.Locked, err)
	}
	if err := s.Trust(ctx, alice, "d-new", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if typ := c.Type(ctx, tk).Val(); typ != "zset" {
		t.Fatalf("trust set is a %s after an enrolment, want zset", typ)
	}
	end, err := c.ZScore(ctx, tk, "d-old").Result()
	if err != nil || time.UnixMicro(int64(end)).Sub(time.Now().Add(3*time.Hour)).Abs() > time.Minute {
		t.Fatalf("d-old ends %v (%v), want the old set's end, about 3h from now", time.UnixMicro(int64(end)), err)
	}
	if ttl := c.PTTL(ctx, tk).Val(); ttl < 2*time.Hour+50*time.Minute || ttl > 3*time.Hour {
		t.Fatalf("set TTL %v, want its latest member's end (3h)", ttl)
	}
}
