package bucket_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// TestClusterNoScriptOnOneMasterChargesOnce: a decision that spans the
// slots of two masters, one of which has lost its script cache (a
// replica just promoted, a master restarted: Redis does not replicate the
// script cache), takes each token once. The other master's script ran in
// the same pipeline and took its tokens; before, the NOSCRIPT made the
// whole decision start over, so that master's bucket was charged twice
// (7.6: exact again after a promotion).
func TestClusterNoScriptOnOneMasterChargesOnce(t *testing.T) {
	t.Parallel()
	cl := testenv.StartCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	t.Cleanup(func() { c.Close() })
	s := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: 5 * time.Second, ExpirySlack: 2 * time.Hour, Cluster: true})
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()

	// Two subjects whose slots are on different masters.
	a := "{ip:1.2.3.4}:b:a"
	ma, err := c.MasterForKey(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	var b string
	var mb *redis.Client
	for _, u := range []string{"u1", "u2", "u3", "u4", "u5", "u6", "u7", "u8", "u9"} {
		k := "{user:" + u + "}:b:b"
		m, err := c.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr != ma.Options().Addr {
			b, mb = k, m
			break
		}
	}
	if b == "" {
		t.Fatal("no key on another master")
	}
	req := bucket.Request{Now: t0, Cost: 1, Limits: []bucket.Limit{
		{Key: a, Burst: 10, Rate: 10, Period: time.Hour},
		{Key: b, Burst: 10, Rate: 10, Period: time.Hour},
	}}
	var res bucket.Result
	if err := s.Decide(ctx, &req, &res); err != nil || !res.Allowed || res.Limits[0].Remaining != 9 || res.Limits[1].Remaining != 9 {
		t.Fatalf("first decision: %v %+v", err, res)
	}
	// b's master forgets the script; a's keeps it.
	if err := mb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Decide(ctx, &req, &res); err != nil || !res.Allowed {
		t.Fatalf("second decision: %v %+v", err, res)
	}
	if res.Limits[0].Remaining != 8 || res.Limits[1].Remaining != 8 {
		t.Fatalf("after one master's NOSCRIPT: remaining a %v, b %v; want 8 and 8 (each decision takes one token of each)",
			res.Limits[0].Remaining, res.Limits[1].Remaining)
	}
	// And the stored state agrees: a zero-cost look at a alone.
	if err := s.Decide(ctx, &bucket.Request{Now: t0, Cost: 0, Limits: req.Limits[:1]}, &res); err != nil || res.Limits[0].Remaining != 8 {
		t.Fatalf("a's bucket holds %v, want 8: %v", res.Limits, err)
	}
}

// TestClusterBatchNoScriptOnOneMasterChargesOnce: the same for the
// single-slot decisions one lane batches into a pipeline across the
// masters: when one master answers NOSCRIPT, only its scripts are sent
// again. Before, the whole batch was run again after loading the script,
// and every decision of it on the other masters took its tokens twice.
func TestClusterBatchNoScriptOnOneMasterChargesOnce(t *testing.T) {
	t.Parallel()
	cl := testenv.StartCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	t.Cleanup(func() { c.Close() })
	s := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: 5 * time.Second, ExpirySlack: 2 * time.Hour, Cluster: true, Lanes: 1})
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	const n = 60
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "{ip:10.0.0." + strconv.Itoa(i) + "}:b:x"
	}
	decideAll := func(step int) {
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for _, k := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var res bucket.Result
				req := bucket.Request{Now: t0, Cost: 1, Limits: []bucket.Limit{{Key: k, Burst: 10, Rate: 10, Period: time.Hour}}}
				if err := s.Decide(ctx, &req, &res); err != nil || !res.Allowed {
					errs <- fmt.Errorf("step %d, %s: %v %+v", step, k, err, res)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	decideAll(1)
	m, err := c.MasterForKey(ctx, keys[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := m.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	decideAll(2)
	for _, k := range keys {
		var res bucket.Result
		if err := s.Decide(ctx, &bucket.Request{Now: t0, Cost: 0, Limits: []bucket.Limit{{Key: k, Burst: 10, Rate: 10, Period: time.Hour}}}, &res); err != nil ||
			res.Limits[0].Remaining != 8 {
			t.Errorf("%s after two decisions of cost 1: %v remaining (%v), want 8", k, res.Limits, err)
		}
	}
}
