package bucket_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// TestRedisPausedDeadlinePerDecision pauses a real redis-server (SIGSTOP)
// under 64 concurrent decisions on one lane: every decision fails with
// ErrUnavailable within Timeout of its call, the wait for the lane
// included (6.6), however many batches queue before it. The margin is
// 10 ms plus how late 64 goroutines sleeping Timeout at the same moment
// wake up (the machine's own scheduling delay, shared with other tests).
func TestRedisPausedDeadlinePerDecision(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	defer c.Close()
	const timeout = 30 * time.Millisecond
	s := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: timeout, Lanes: 1, MaxBatch: 4})
	defer s.Close()
	req := func(i int) *bucket.Request {
		return &bucket.Request{Cost: 1, Limits: []bucket.Limit{{Key: fmt.Sprintf("{ip:%d}:b:x", i), Burst: 10, Rate: 10, Period: time.Minute}}}
	}
	var res bucket.Result
	if err := s.Decide(context.Background(), req(0), &res); err != nil {
		t.Fatal(err)
	}
	if err := srv.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	p := srv.Cmd.Process
	defer func() { _ = p.Signal(syscall.SIGCONT) }()
	var wg sync.WaitGroup
	took := make([]time.Duration, 64)
	errs := make([]error, 64)
	slept := make([]time.Duration, 64)
	for i := range slept { // the control: the same wait, without the store
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			time.Sleep(timeout)
			slept[i] = time.Since(t0) - timeout
		}()
	}
	for i := range took {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res bucket.Result
			t0 := time.Now()
			errs[i] = s.Decide(context.Background(), req(i), &res)
			took[i] = time.Since(t0)
		}()
	}
	wg.Wait()
	var worst, noise time.Duration
	for _, d := range slept {
		noise = max(noise, d)
	}
	bound := timeout + 10*time.Millisecond + noise
	for i := range took {
		worst = max(worst, took[i])
		if !errorsIs(errs[i], bucket.ErrUnavailable) || took[i] > bound {
			t.Errorf("decision %d: %v after %v; want ErrUnavailable within %v", i, errs[i], took[i], bound)
		}
	}
	t.Logf("64 decisions on one lane, Redis paused: worst %v (timeout %v; sleepers woke up to %v late)", worst, timeout, noise)
}
