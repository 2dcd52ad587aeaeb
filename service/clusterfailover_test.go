package service

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

const failoverPolicy = `version: 1
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "* *", class: read}
limits:
  - {name: login-account, by: [account, route], rate: 1000/min, if: {class: auth}}
  - {name: per-user, by: [user], rate: 5/min, if: {class: read}}
failure_mode: {default: open, auth: closed}
risk:
  velocity:
    - {name: account-failures, event: login_failed, by: account, threshold: 3, window: 10m, action: lockout, duration: 15m}
`

// keyOf finds the one key of the cluster whose name contains part.
func keyOf(t *testing.T, addrs []string, part string) string {
	t.Helper()
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer cl.Close()
	var found []string
	var mu sync.Mutex
	err := cl.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
		keys, err := c.Keys(ctx, "*"+part+"*").Result()
		mu.Lock()
		found = append(found, keys...)
		mu.Unlock()
		return err
	})
	if err != nil || len(found) == 0 {
		t.Fatalf("no key with %q in the cluster (%v)", part, err)
	}
	return found[0]
}

// exactFor sends 20 concurrent checks for a fresh user against the 5/min
// per-user limit and reports "" when exactly 5 were allowed and no answer
// was degraded.
func exactFor(base, user string) string {
	var allowed, degraded, other atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Post(base+"/v1/check", "application/json", strings.NewReader(`{"endpoint":"GET /feed","ip":"192.0.2.8","user_id":"`+user+`"}`))
			if err != nil {
				other.Add(1)
				return
			}
			resp.Body.Close()
			if resp.Header.Get("X-RateLimit-Degraded") != "" {
				degraded.Add(1)
			}
			switch resp.StatusCode {
			case 200:
				allowed.Add(1)
			case 429:
			default:
				other.Add(1)
			}
		}()
	}
	wg.Wait()
	if allowed.Load() != 5 || degraded.Load() != 0 || other.Load() != 0 {
		return fmt.Sprintf("%s: %d allowed of 20 on capacity 5, %d degraded, %d other answers", user, allowed.Load(), degraded.Load(), other.Load())
	}
	return ""
}

// TestRedisClusterFailover kills the master that holds a lockout under
// load, on a Redis Cluster with one replica per master (7.6): while the
// slot has no master every answer follows its failure mode within the
// store deadline (plus the test's margin), within 10 s of the replica's
// promotion decisions are exact again (20 concurrent checks on capacity 5
// admit 5, for users on every shard), and the lockout and the admin
// multiplier the replica had are still in force.
func TestRedisClusterFailover(t *testing.T) {
	t.Parallel()
	c := testenv.StartReplicatedCluster(t)
	const deadline = 100 * time.Millisecond
	_, base := start(t, Config{ConfigPath: writePolicy(t, failoverPolicy), RedisURL: "redis+cluster://" + strings.Join(c.Addrs, ","),
		StoreTimeout: deadline, AdminToken: "tok"})

	reportFailedLogins(t, base, "alice", 3)
	eventually(t, 10*time.Second, func() string {
		if !loginLocked(t, base, "alice") {
			return "alice not locked"
		}
		return ""
	})
	req, _ := http.NewRequest("PUT", base+"/v1/admin/multipliers/user/u_vip", strings.NewReader(`{"multiplier": 0.5, "reason": "failover test"}`))
	req.Header.Set("Authorization", "Bearer tok")
	if resp, err := client.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("set multiplier: %v %v", resp, err)
	}
	lockKey := keyOf(t, c.Addrs, "alice")
	eventually(t, 10*time.Second, func() string {
		if !c.ReplicaHas(lockKey) || !c.ReplicaHas(keyOf(t, c.Addrs, "u_vip")) {
			return "replicas do not hold the lock and the multiplier yet"
		}
		return ""
	})
	master, err := c.MasterOf(lockKey)
	if err != nil {
		t.Fatal(err)
	}

	var wrong, slow, total, seq atomic.Int64
	stop := make(chan struct{})
	wg := hammer(4, stop, func() {
		i := seq.Add(1)
		body, want := `{"endpoint":"GET /feed","ip":"192.0.2.9","user_id":"load-`+fmt.Sprint(i%256)+`"}`, []int{200, 429}
		if i%2 == 1 { // auth fails closed: 503 while its slot has no master
			body, want = `{"endpoint":"POST /auth/login","ip":"192.0.2.9","account":"acct-`+fmt.Sprint(i%256)+`"}`, []int{200, 429, 503}
		}
		t0 := time.Now()
		resp, err := client.Post(base+"/v1/check", "application/json", strings.NewReader(body))
		took := time.Since(t0)
		total.Add(1)
		if err != nil {
			wrong.Add(1)
			return
		}
		resp.Body.Close()
		if !slices.Contains(want, resp.StatusCode) {
			wrong.Add(1)
		}
		if took > 2*deadline+150*time.Millisecond {
			slow.Add(1)
		}
	})
	eventually(t, 10*time.Second, func() string { // load before the kill
		if n := total.Load(); n < 40 {
			return fmt.Sprintf("%d answers before the kill, want 40", n)
		}
		return ""
	})
	master.Stop()
	eventually(t, 30*time.Second, func() string {
		if !c.Promoted() {
			return "no replica promoted"
		}
		return ""
	})
	promoted := time.Now()
	close(stop)
	wg.Wait()
	if wrong.Load() != 0 || slow.Load() != 0 {
		t.Fatalf("during the failover %d of %d answers were wrong and %d slower than the deadline allows", wrong.Load(), total.Load(), slow.Load())
	}
	n := 0
	eventually(t, 10*time.Second, func() string {
		for ; n < 8; n++ { // 8 fresh users: every shard, the promoted one included
			if msg := exactFor(base, fmt.Sprintf("exact-%d-%d", n, time.Now().UnixNano())); msg != "" {
				return msg
			}
		}
		return ""
	})
	exactAfter := time.Since(promoted)
	eventually(t, 10*time.Second, func() string {
		resp, body := post(t, base+"/v1/check", `{"endpoint":"POST /auth/login","ip":"198.51.100.7","account":"alice"}`)
		if resp.StatusCode != 429 || !strings.Contains(body, "ACCOUNT_LOCKED") {
			return fmt.Sprintf("alice after the failover: %d %s, want the lockout the replica had", resp.StatusCode, body)
		}
		return ""
	})
	t.Logf("alice locked %v after the promotion", time.Since(promoted))
	if code, body := adminGet(t, base+"/v1/admin/subjects/user/u_vip", "tok"); code != 200 || !strings.Contains(body, `"source":"admin"`) {
		t.Fatalf("u_vip after the failover: %d %s, want its admin multiplier", code, body)
	}
	t.Logf("%d answers during the failover, all by failure mode within the deadline; exact %v after the promotion", total.Load(), exactAfter.Round(time.Millisecond))
}

// TestThreeLimitersOneStore runs three limiters on one Redis Cluster with
// their L1 caches on (7.6): 60 concurrent checks spread over the three, on
// a per-user capacity of 5, admit exactly 5, for each of several users.
func TestThreeLimitersOneStore(t *testing.T) {
	t.Parallel()
	c := testenv.StartCluster(t)
	policyPath := writePolicy(t, failoverPolicy)
	var bases []string
	for i := 0; i < 3; i++ {
		// exactness, not deadlines, is under test: a generous store timeout
		// keeps a loaded machine's slow answers from turning into failure modes
		_, base := start(t, Config{ConfigPath: policyPath, RedisURL: "redis+cluster://" + strings.Join(c.Addrs, ","), StoreTimeout: 2 * time.Second})
		bases = append(bases, base)
		eventually(t, 10*time.Second, func() string {
			resp, _ := post(t, base+"/v1/check", `{"endpoint":"GET /feed","ip":"192.0.2.8","user_id":"warm-up"}`)
			if resp.Header.Get("X-RateLimit-Degraded") != "" {
				return "limiter not on its store yet"
			}
			return ""
		})
	}
	for u := 0; u < 4; u++ {
		user := fmt.Sprintf("shared-%d", u)
		var allowed, other atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < 60; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client.Post(bases[i%3]+"/v1/check", "application/json", strings.NewReader(`{"endpoint":"GET /feed","ip":"192.0.2.8","user_id":"`+user+`"}`))
				if err != nil {
					other.Add(1)
					return
				}
				resp.Body.Close()
				switch {
				case resp.StatusCode == 200 && resp.Header.Get("X-RateLimit-Degraded") == "":
					allowed.Add(1)
				case resp.StatusCode != 429:
					other.Add(1)
				}
			}()
		}
		wg.Wait()
		if allowed.Load() != 5 || other.Load() != 0 {
			t.Fatalf("%s: %d of 60 allowed across three limiters on capacity 5, %d other answers", user, allowed.Load(), other.Load())
		}
	}
}
