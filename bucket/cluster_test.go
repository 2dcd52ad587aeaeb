package bucket_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
)

func clusterStore(t *testing.T) bucket.Store {
	t.Helper()
	cl := testenv.StartCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	t.Cleanup(func() { c.Close() })
	s := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: 5 * time.Second, ExpirySlack: 2 * time.Hour, Cluster: true})
	t.Cleanup(func() { s.Close() })
	return s
}

// TestCluster runs multi-slot decisions on a real 3-node Redis Cluster:
// all-or-nothing holds (a slot that took gives back when another denied),
// multipliers and locks of other slots apply, and one bucket under 400
// concurrent requests admits exactly its capacity.
func TestCluster(t *testing.T) {
	t.Parallel()
	s := clusterStore(t)
	ctx := context.Background()
	var res bucket.Result

	// keys of different subjects land in different slots
	a, b := "{ip:1.2.3.4}:b:a", "{user:u1}:b:b"
	if bucket.Slot(a) == bucket.Slot(b) || bucket.Slot("{ip:1.2.3.4}:m") != bucket.Slot(a) {
		t.Fatalf("slots: %d %d %d", bucket.Slot(a), bucket.Slot(b), bucket.Slot("{ip:1.2.3.4}:m"))
	}
	req := bucket.Request{Now: t0, Cost: 1, Limits: []bucket.Limit{
		{Key: a, Burst: 5, Rate: 5, Period: time.Minute},
		{Key: b, Burst: 2, Rate: 2, Period: time.Hour},
	}}
	for i, want := range []struct {
		allowed bool
		a, b    float64
	}{{true, 4, 1}, {true, 3, 0}, {false, 3, 0}, {false, 3, 0}} {
		if err := s.Decide(ctx, &req, &res); err != nil {
			t.Fatal(err)
		}
		if res.Allowed != want.allowed || res.Limits[0].Remaining != want.a || res.Limits[1].Remaining != want.b {
			t.Fatalf("step %d: %+v", i, res)
		}
	}
	// the refunds were real: a alone still has 3
	if err := s.Decide(ctx, &bucket.Request{Now: t0, Cost: 0, Limits: req.Limits[:1]}, &res); err != nil || res.Limits[0].Remaining != 3 {
		t.Fatalf("a after refunds: %+v %v", res, err)
	}

	// a multiplier on a subject of another slot applies
	dev := bucket.MultiplierKey(s.Prefix(), "device", "d1")
	if err := s.SetMultiplier(ctx, bucket.Subject{Kind: "device", ID: "d1"}, bucket.Multiplier{Source: "admin", Value: 0.5, ExpiresAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	mreq := bucket.Request{Now: t0, Cost: 1, Subjects: []bucket.RequestSubject{{Key: dev, Static: 1, Unverified: 1}},
		Limits: []bucket.Limit{{Key: "{ip:9.9.9.9}:b:x", Burst: 10, Rate: 10, Period: time.Minute, Subjects: 1}, {Key: "{user:u9}:b:y", Burst: 10, Rate: 10, Period: time.Minute}}}
	if err := s.Decide(ctx, &mreq, &res); err != nil || !res.Allowed || res.Limits[0].Burst != 5 || !res.Subjects[0].Read || res.Subjects[0].Mult != 0.5 {
		t.Fatalf("multiplier across slots: %+v %v", res, err)
	}
	// and in one slot: the script reads the subject's summary on its node
	one := bucket.Request{Now: t0, Cost: 1, Subjects: []bucket.RequestSubject{{Key: dev, Static: 1, Unverified: 1}},
		Limits: []bucket.Limit{{Key: s.Prefix() + "{device:d1}:b:z", Burst: 10, Rate: 10, Period: time.Minute, Subjects: 1}}}
	if err := s.Decide(ctx, &one, &res); err != nil || !res.Allowed || res.Limits[0].Burst != 5 || !res.Subjects[0].Read || res.Subjects[0].Mult != 0.5 {
		t.Fatalf("multiplier in one slot: %+v %v", res, err)
	}

	// locks and trust sets of another slot
	alice := bucket.Subject{Kind: "account", ID: "alice"}
	lk, tk := bucket.LockKey(s.Prefix(), "account", "alice"), bucket.TrustKey(s.Prefix(), "account", "alice")
	if err := s.SetLock(ctx, alice, bucket.Lock{Kind: "lockout", Rule: "r", Until: t0.Add(time.Hour), Exempt: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Trust(ctx, alice, "d-good", t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	lreq := bucket.Request{Now: t0, Cost: 1, Locks: []string{lk}, TrustKeys: []string{tk},
		Limits: []bucket.Limit{{Key: "{ip:5.5.5.5}:b:l", Burst: 10, Rate: 10, Period: time.Minute}}}
	for _, tc := range []struct {
		device string
		locked bool
	}{{"d-evil", true}, {"d-good", false}} {
		lreq.Device = tc.device
		if err := s.Decide(ctx, &lreq, &res); err != nil || res.Locked != tc.locked {
			t.Fatalf("device %s: locked=%v err=%v", tc.device, res.Locked, err)
		}
	}

	// without an injected time a multi-slot decision runs at Redis's TIME,
	// read from the node of its first key
	nreq := bucket.Request{Cost: 1, Limits: []bucket.Limit{
		{Key: "{ip:7.7.7.7}:b:n", Burst: 1, Rate: 1, Period: time.Hour},
		{Key: "{user:u7}:b:n", Burst: 1, Rate: 1, Period: time.Hour},
	}}
	if bucket.Slot(nreq.Limits[0].Key) == bucket.Slot(nreq.Limits[1].Key) {
		t.Fatal("one slot: not the multi-slot path")
	}
	before := time.Now()
	if err := s.Decide(ctx, &nreq, &res); err != nil || !res.Allowed || res.Now.Before(before.Add(-time.Second)) || res.Now.After(time.Now().Add(time.Second)) {
		t.Fatalf("decision at Redis's time: %+v %v", res, err)
	}

	// exactness on one bucket (one slot: one script)
	const n, capacity = 400, 57
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r bucket.Result
			q := bucket.Request{Now: t0, Cost: 1, Limits: []bucket.Limit{{Key: "{ip:7.7.7.7}:b:c", Burst: capacity, Rate: 1, Period: time.Hour}}}
			if err := s.Decide(ctx, &q, &r); err == nil && r.Allowed {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != capacity {
		t.Fatalf("admitted %d, want exactly %d", admitted.Load(), capacity)
	}

	// across slots under contention: never more than the capacity, and no
	// token lost: what was not admitted is still in the bucket
	admitted.Store(0)
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var r bucket.Result
			q := bucket.Request{Now: t0, Cost: 1, Limits: []bucket.Limit{
				{Key: "{ip:8.8.8.8}:b:c", Burst: 30, Rate: 1, Period: time.Hour},
				{Key: "{user:w" + string(rune('a'+i%20)) + "}:b:c", Burst: 1000, Rate: 1, Period: time.Hour},
			}}
			if err := s.Decide(ctx, &q, &r); err == nil && r.Allowed {
				admitted.Add(1)
			}
		}(i)
	}
	wg.Wait()
	peek := bucket.Request{Now: t0, Limits: []bucket.Limit{{Key: "{ip:8.8.8.8}:b:c", Burst: 30, Rate: 1, Period: time.Hour}}}
	if err := s.Decide(ctx, &peek, &res); err != nil {
		t.Fatal(err)
	}
	if got := admitted.Load(); got > 30 || got == 0 || res.Limits[0].Remaining != float64(30-got) {
		t.Fatalf("multi-slot contention: admitted %d, bucket holds %v (want %d)", got, res.Limits[0].Remaining, 30-got)
	}
}
