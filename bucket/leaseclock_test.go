package bucket_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// TestLeasesByRedisTime (7.4, issue 25 item 4): a concurrency lease taken
// without an injected time ends at Redis's TIME plus the limit's
// lease_ttl, however wrong the limiter host's clock is: the store runs in
// a synctest bubble whose clock stands at 2000-01-01, on the single-node
// and the Cluster path.
func TestLeasesByRedisTime(t *testing.T) {
	t.Parallel()
	shared, p := testenv.Redis(t)
	real, err := shared.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, cluster := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
			defer c.Close()
			s := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: 5 * time.Second, Prefix: p, Cluster: cluster})
			defer s.Close()
			key := p + "{user:clock}:b:c"
			if cluster {
				key += "-cluster"
			}
			conc := bucket.Limit{Key: key, Kind: bucket.KindConcurrency, Burst: 1, LeaseTTL: time.Minute}
			other := bucket.Limit{Key: p + "{ip:clock}:b:b", Burst: 1e6, Rate: 1, Period: time.Hour}
			var res bucket.Result
			req := bucket.Request{Cost: 1, Lease: lease(1), Limits: []bucket.Limit{conc, other}}
			if err := s.Decide(context.Background(), &req, &res); err != nil || !res.Allowed {
				t.Fatalf("cluster %v: %+v %v", cluster, res, err)
			}
			// reset is when the lease ends: Redis's now + 1 minute
			if end := res.Limits[0].Reset; end.Before(real.Add(time.Minute)) || end.After(real.Add(2*time.Minute)) {
				t.Fatalf("cluster %v: lease ends %v; want Redis's time %v + 1m", cluster, end, real)
			}
			req.Lease = lease(2)
			if err := s.Decide(context.Background(), &req, &res); err != nil || res.Allowed {
				t.Fatalf("cluster %v: a second lease on capacity 1: %+v %v", cluster, res, err)
			}
			if ok, err := s.Release(context.Background(), lease(1), []string{key}); !ok || err != nil {
				t.Fatalf("cluster %v: release %v %v", cluster, ok, err)
			}
		})
	}
}
