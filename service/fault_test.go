package service

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// hammer runs f from n goroutines until stop is closed.
func hammer(n int, stop chan struct{}, f func()) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					f()
				}
			}
		}()
	}
	return &wg
}

// TestRedisKilledUnderLoad kills Redis while 8 clients hammer the check
// API: every answer is a 200 (read fails open) or a 503 (auth fails
// closed), none waits past the store deadline plus a margin, and
// decisions are normal again once Redis returns. The load is measured in
// answers, not time: 200 before the kill, then 100 logins answered 503
// (the store seen down) during the outage.
func TestRedisKilledUnderLoad(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	const deadline = 100 * time.Millisecond
	_, base := start(t, Config{RedisURL: "redis://" + srv.Addr + "/0", StoreTimeout: deadline})
	var bad, slow, total, refused atomic.Int64
	var worst, slowest atomic.Int64
	client := &http.Client{Timeout: 5 * time.Second}
	check := func(body string, want ...int) {
		t0 := time.Now()
		resp, err := client.Post(base+"/v1/check", "application/json", strings.NewReader(body))
		took := time.Since(t0)
		total.Add(1)
		if err != nil {
			bad.Add(1)
			return
		}
		resp.Body.Close()
		ok := false
		for _, w := range want {
			ok = ok || resp.StatusCode == w
		}
		if !ok {
			bad.Add(1)
		}
		if resp.StatusCode == 503 {
			refused.Add(1)
		}
		// 6.6 bounds every answer by --store-timeout + 10 ms of its
		// arrival: the contract's own bound, with slack for a loaded
		// machine (the client's clock starts before the request is sent).
		// Answers are judged once the run is over, against the bound plus
		// what the machine itself added to a wait (the control below).
		if int64(took) > worst.Load() {
			worst.Store(int64(took))
		}
		if took > 2*deadline+150*time.Millisecond {
			slow.Add(1)
			slowest.Store(max(slowest.Load(), int64(took)))
		}
	}
	stop := make(chan struct{})
	// The control: a goroutine of this process sleeping for the deadline
	// over and over; the most it overslept is the machine's noise, which
	// explains a late answer by as much and no more.
	var noise atomic.Int64
	control := hammer(1, stop, func() {
		t0 := time.Now()
		time.Sleep(deadline)
		noise.Store(max(noise.Load(), int64(time.Since(t0)-deadline)))
	})
	wg := hammer(8, stop, func() {
		check(`{"endpoint":"GET /feed","ip":"192.0.2.9","user_id":"u_42"}`, 200, 429) // never 5xx: reads fail open
		check(`{"endpoint":"POST /auth/login","ip":"192.0.2.9","account":"a"}`, 200, 429, 503)
	})
	answered := func(what string, n func() int64, want int64) {
		t.Helper()
		eventually(t, 30*time.Second, func() string {
			if got := n(); got < want {
				return fmt.Sprintf("%d %s, want %d", got, what, want)
			}
			return ""
		})
	}
	answered("answers before the kill", total.Load, 200)
	srv.Stop()
	answered("logins refused during the outage", refused.Load, 100)
	close(stop)
	wg.Wait()
	control.Wait()
	late := slowest.Load() > int64(2*deadline+150*time.Millisecond)+noise.Load()
	if bad.Load() != 0 || late {
		t.Fatalf("%d of %d answers wrong; %d slower than the deadline allows, worst %v, the machine's timers overslept up to %v", bad.Load(), total.Load(), slow.Load(), time.Duration(worst.Load()), time.Duration(noise.Load()))
	}
	srv.Restart(t)
	eventually(t, 10*time.Second, func() string {
		resp, _ := post(t, base+"/v1/check", `{"endpoint":"POST /auth/login","ip":"192.0.2.9","account":"b"}`)
		if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Degraded") != "" {
			return "not normal: " + resp.Status
		}
		return ""
	})
	t.Logf("%d requests during the outage test, worst latency %v", total.Load(), time.Duration(worst.Load()))
}

// TestRedisPaused: a Redis that stops answering (CLIENT PAUSE) is treated
// as down after the store deadline; nobody waits longer.
func TestRedisPaused(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	_, base := start(t, Config{RedisURL: "redis://" + srv.Addr + "/0", StoreTimeout: 50 * time.Millisecond})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	read := `{"endpoint":"GET /feed","ip":"192.0.2.9","user_id":"u_42"}`
	if resp, _ := post(t, base+"/v1/check", read); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Degraded") != "" {
		t.Fatalf("before: %d", resp.StatusCode)
	}
	if err := c.Do(context.Background(), "CLIENT", "PAUSE", "1500", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	resp, _ := post(t, base+"/v1/check", read)
	// 6.6's bound (--store-timeout + 10 ms), with slack for a loaded
	// machine: the answer must come long before the pause (1.5 s) ends.
	if took := time.Since(t0); took > 500*time.Millisecond {
		t.Fatalf("a request waited %v on a paused Redis", took)
	}
	if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Degraded") != "1" {
		t.Fatalf("during pause: %d degraded=%q", resp.StatusCode, resp.Header.Get("X-RateLimit-Degraded"))
	}
	resp, _ = post(t, base+"/v1/check", `{"endpoint":"POST /auth/login","ip":"192.0.2.9","account":"a"}`)
	if resp.StatusCode != 503 {
		t.Fatalf("auth during pause: %d", resp.StatusCode)
	}
	eventually(t, 5*time.Second, func() string {
		resp, _ := post(t, base+"/v1/check", read)
		if resp.Header.Get("X-RateLimit-Degraded") != "" {
			return "still degraded"
		}
		return ""
	})
}

// TestRedisOOM: a Redis refusing writes (maxmemory reached, noeviction)
// fails every decision's script: fail-open classes degrade, fail-closed
// ones answer 503; the limiter neither crashes nor hangs.
func TestRedisOOM(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	_, base := start(t, Config{RedisURL: "redis://" + srv.Addr + "/0"})
	if resp, _ := post(t, base+"/v1/check", `{"endpoint":"GET /feed","ip":"192.0.2.9","user_id":"u_42"}`); resp.Header.Get("X-RateLimit-Degraded") != "" {
		t.Fatal("degraded before OOM")
	}
	// Fill past the limit, then lower the limit below what is used: every
	// write is refused from now on.
	big := strings.Repeat("x", 64<<10)
	for i := 0; i < 64; i++ {
		if err := c.Set(context.Background(), "fill:"+itoa(i%10)+strings.Repeat("k", i), big, 0).Err(); err != nil {
			break
		}
	}
	if err := c.ConfigSet(context.Background(), "maxmemory", "1mb").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(context.Background(), "probe", "1", 0).Err(); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("Redis still accepts writes: %v", err)
	}
	resp, _ := post(t, base+"/v1/check", `{"endpoint":"GET /feed","ip":"192.0.2.10","user_id":"u_43"}`)
	if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Degraded") != "1" {
		t.Fatalf("read under OOM: %d degraded=%q", resp.StatusCode, resp.Header.Get("X-RateLimit-Degraded"))
	}
	resp, body := post(t, base+"/v1/check", `{"endpoint":"POST /auth/login","ip":"192.0.2.9","account":"z"}`)
	if resp.StatusCode != 503 || !strings.Contains(body, "LIMITER_UNAVAILABLE") {
		t.Fatalf("auth under OOM: %d %s", resp.StatusCode, body)
	}
}

// TestRedisRestartedEmpty: riskd re-asserts an active lockout after Redis
// restarts empty (buckets start full: that much is lost by design).
func TestRedisRestartedEmpty(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	stream, subj := testenv.SharedStreams(t)
	policyPath := writePolicy(t, loopPolicy)
	redisURL := "redis://" + srv.Addr + "/0"
	_, base := start(t, Config{ConfigPath: policyPath, RedisURL: redisURL, NATSURL: testenv.NATSURL(), SubjectPrefix: subj, StreamName: stream, L1TTL: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	rr, err := StartRiskd(ctx, RiskdConfig{ConfigPath: policyPath, Listen: "127.0.0.1:0", RedisURL: redisURL, NATSURL: testenv.NATSURL(),
		SubjectPrefix: subj, StreamName: stream, DecisionsMaxBytes: 16 << 20, EventsMaxBytes: 16 << 20, Reassert: 200 * time.Millisecond, LeaseTTL: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); <-rr.Done }()
	eventually(t, 10*time.Second, func() string {
		if _, body := get(t, "http://"+rr.Addr+"/readyz"); !strings.Contains(body, `"status":"ready"`) {
			return "riskd not ready"
		}
		return ""
	})
	for i := 0; i < 3; i++ {
		post(t, base+"/v1/report", `{"type":"login_failed","account":"gina"}`)
	}
	locked := func() string {
		resp, _ := post(t, base+"/v1/check", `{"endpoint":"POST /auth/login","ip":"198.51.100.7","account":"gina"}`)
		if resp.StatusCode != 429 {
			return "not locked: " + resp.Status
		}
		return ""
	}
	eventually(t, 5*time.Second, locked)
	srv.Restart(t) // empty: the lock is gone from Redis
	eventually(t, 10*time.Second, locked)
}

// TestGracefulShutdownDrains: a request in flight when the limiter is
// told to stop still gets its answer, while the listeners no longer
// accept (all of them close at once: they drain together, so /readyz is
// not reachable to say "draining" meanwhile; TestLimiterStopOrder checks
// readiness turns first).
func TestGracefulShutdownDrains(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var once sync.Once
	releaseOnce := func() { once.Do(func() { close(release) }) }
	entered := make(chan struct{}, 1)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		_, _ = w.Write([]byte("late but complete"))
	})
	t.Cleanup(releaseOnce) // however the test ends, before the upstream closes
	ctx, cancel := context.WithCancel(context.Background())
	r, err := Start(ctx, Config{Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Upstream: up, Logger: slog.New(slog.DiscardHandler), Getenv: testGetenv})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		resp, err := client.Get("http://" + r.Addr + "/slow")
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		b := make([]byte, 64)
		n, _ := resp.Body.Read(b)
		resp.Body.Close()
		got <- resp.Status + " " + string(b[:n])
	}()
	<-entered
	cancel()                                     // SIGTERM
	eventually(t, 5*time.Second, func() string { // the drain began: neither listener accepts
		for _, addr := range []string{r.Addr, r.APIAddr} {
			if nc, err := net.Dial("tcp", addr); err == nil {
				nc.Close()
				return addr + " still accepts"
			}
		}
		return ""
	})
	releaseOnce()
	if g := <-got; g != "200 OK late but complete" {
		t.Fatalf("in-flight request: %s", g)
	}
	<-r.Done
	if r.Err != nil {
		t.Fatalf("shutdown: %v", r.Err)
	}
}

// TestReloadUnderLoadDropsNothing rewrites the policy file 20 times while
// clients hammer the check API: every answer is a 200 or a 429. Each
// rewrite is followed by a wait for its positive signal, no pause: the
// answers carry the new limit (the reload is in force), and then 16 more
// requests have been answered under it.
func TestReloadUnderLoadDropsNothing(t *testing.T) {
	t.Parallel()
	path := writePolicy(t, "version: 1\nlimits:\n  - {name: per-ip, by: [ip], rate: 100/s}\n")
	_, base := start(t, Config{ConfigPath: path, WatchInterval: 10 * time.Millisecond})
	var bad, total atomic.Int64
	var limit atomic.Value // the X-RateLimit-Limit of the latest answer
	limit.Store("")
	client := &http.Client{Timeout: 5 * time.Second}
	stop := make(chan struct{})
	wg := hammer(8, stop, func() {
		resp, err := client.Post(base+"/v1/check", "application/json", strings.NewReader(`{"endpoint":"GET /","ip":"192.0.2.1"}`))
		total.Add(1)
		if err != nil {
			bad.Add(1)
			return
		}
		resp.Body.Close()
		limit.Store(resp.Header.Get("X-RateLimit-Limit"))
		if resp.StatusCode != 200 && resp.StatusCode != 429 {
			bad.Add(1)
		}
	})
	for i := 0; i < 20; i++ {
		rate, want := []string{"50/s", "10/s", "1000/min", "100/s"}[i%4], []string{"50", "10", "1000", "100"}[i%4]
		if err := os.WriteFile(path, []byte("version: 1\nlimits:\n  - {name: per-ip, by: [ip], rate: "+rate+"}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, func() string {
			if got := limit.Load().(string); got != want {
				return fmt.Sprintf("reload %d (%s): answers carry limit %q, want %q", i, rate, got, want)
			}
			return ""
		})
		mark := total.Load()
		testenv.Eventually(t, 10*time.Second, func() string {
			if n := total.Load() - mark; n < 16 {
				return fmt.Sprintf("reload %d: %d requests answered under it, want 16", i, n)
			}
			return ""
		})
	}
	close(stop)
	wg.Wait()
	if bad.Load() != 0 || total.Load() == 0 {
		t.Fatalf("%d of %d requests failed during reloads", bad.Load(), total.Load())
	}
	_, m := get(t, base+"/metrics")
	if !strings.Contains(m, `tollgate_policy_reloads_total{result="ok"}`) {
		t.Fatal("no reload counted")
	}
}
