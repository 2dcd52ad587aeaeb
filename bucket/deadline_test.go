package bucket_test

import (
	"context"
	"fmt"
	"os"
	"strings"
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
// A decision that is not ErrUnavailable fails at once. A trial with a late
// answer is run again, up to three trials: a stall of a loaded machine hits
// one trial, while a deadline that does not count the lane wait (the old
// code) is late in every trial.
func TestRedisPausedDeadlinePerDecision(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	defer c.Close()
	const timeout = 30 * time.Millisecond
	s := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: timeout, Lanes: 1, MaxBatch: 4})
	defer s.Close()
	var late []string
	for trial := 1; trial <= 3; trial++ {
		l := pausedTrial(t, srv.Cmd.Process, s, timeout)
		if len(l) == 0 {
			return
		}
		late = append(late, fmt.Sprintf("trial %d: %s", trial, strings.Join(l, "; ")))
	}
	t.Errorf("late in every trial:\n%s", strings.Join(late, "\n"))
}

// pausedTrial runs one trial of TestRedisPausedDeadlinePerDecision with
// Redis paused for its length, and returns the late decisions.
func pausedTrial(t *testing.T, p *os.Process, s *bucket.RedisStore, timeout time.Duration) []string {
	t.Helper()
	req := func(i int) *bucket.Request {
		return &bucket.Request{Cost: 1, Limits: []bucket.Limit{{Key: fmt.Sprintf("{ip:%d}:b:x", i), Burst: 10, Rate: 10, Period: time.Minute}}}
	}
	var res bucket.Result
	if err := s.Decide(context.Background(), req(0), &res); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
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
	var late []string
	for i := range took {
		worst = max(worst, took[i])
		if !errorsIs(errs[i], bucket.ErrUnavailable) {
			t.Fatalf("decision %d: %v after %v; want ErrUnavailable", i, errs[i], took[i])
		}
		if took[i] > bound {
			late = append(late, fmt.Sprintf("decision %d after %v, bound %v", i, took[i], bound))
		}
	}
	t.Logf("64 decisions on one lane, Redis paused: worst %v (timeout %v; sleepers woke up to %v late)", worst, timeout, noise)
	return late
}
