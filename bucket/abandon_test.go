package bucket

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// oneToken is a decision on a bucket of one token an hour at key.
func oneToken(key string) *Request {
	return &Request{Now: time.Unix(1_800_000_000, 0), Cost: 1,
		Limits:   []Limit{{Key: key + ":b", Burst: 1, Rate: 1, Period: time.Hour, Subjects: 1}},
		Subjects: []RequestSubject{{Key: key + ":m", Static: 1, Unverified: 1}}}
}

// TestAbandonedDecisionCostsNothing: a decision whose caller has gone
// (its context done: an HTTP/2 stream reset, a client that hung up) is
// never sent to Redis, whether the caller went before it was queued or
// while it waited for its lane. So a flood of abandoned decisions (rapid
// reset) takes no round trip from the others, and spends no token: the
// next decision on the same bucket of one token is allowed. The old code
// sent both, and the next decision was denied.
func TestAbandonedDecisionCostsNothing(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	s := NewRedisStore(c, RedisOptions{Timeout: 10 * time.Second, Lanes: 1, MaxBatch: 1, ExpirySlack: time.Hour})
	defer s.Close()
	ctx := context.Background()
	var res Result
	if err := s.Decide(ctx, oneToken("{warm}"), &res); err != nil || !res.Allowed { // loads the script, opens the connection
		t.Fatalf("warm-up: %v %+v", err, res)
	}

	gone, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Decide(gone, oneToken("{before}"), &res); !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnanswered) {
		t.Fatalf("a caller gone before the call: %v, want ErrUnavailable and context.Canceled, not ErrUnanswered", err)
	}

	// The lane is held by a decision on a paused Redis; a second one
	// waits in the queue, and its caller goes.
	srv.Pause(t)
	held := make(chan error, 1)
	go func() { var r Result; held <- s.Decide(ctx, oneToken("{held}"), &r) }()
	testenv.Eventually(t, 10*time.Second, func() string {
		if st := c.PoolStats(); st.IdleConns != 0 {
			return fmt.Sprintf("the lane has not sent the held decision (%d idle connections)", st.IdleConns)
		}
		return ""
	})
	queued, leave := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() { var r Result; left <- s.Decide(queued, oneToken("{queued}"), &r) }()
	testenv.Eventually(t, 10*time.Second, func() string {
		if n := len(s.queue); n != 1 {
			return fmt.Sprintf("%d decisions queued, want the one whose caller goes", n)
		}
		return ""
	})
	leave()
	if err := <-left; !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnanswered) {
		t.Fatalf("a caller gone while queued: %v, want context.Canceled, not ErrUnanswered", err)
	}
	srv.Resume(t)
	if err := <-held; err != nil {
		t.Fatalf("the held decision: %v", err)
	}

	for _, key := range []string{"{before}", "{queued}"} {
		if err := s.Decide(ctx, oneToken(key), &res); err != nil || !res.Allowed {
			t.Fatalf("%s: the next decision after an abandoned one: %v, allowed %v; want its token unspent", key, err, res.Allowed)
		}
	}
}

// TestUnansweredDecision: a decision sent to a Redis that stalls past the
// store timeout fails with ErrUnanswered beside ErrUnavailable, and Redis
// runs it once it goes on (its token is spent): the caller must treat
// what it may have taken as taken (the engine gives its concurrency
// slots back).
func TestUnansweredDecision(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	s := NewRedisStore(c, RedisOptions{Timeout: 100 * time.Millisecond, Lanes: 1, MaxBatch: 1, ExpirySlack: time.Hour})
	defer s.Close()
	ctx := context.Background()
	var res Result
	if err := s.Decide(ctx, oneToken("{warm}"), &res); err != nil || !res.Allowed {
		t.Fatalf("warm-up: %v %+v", err, res)
	}
	srv.Pause(t)
	err := s.Decide(ctx, oneToken("{stalled}"), &res)
	srv.Resume(t)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrUnanswered) {
		t.Fatalf("a decision Redis took but did not answer in time: %v, want ErrUnavailable and ErrUnanswered", err)
	}
	s2 := NewRedisStore(c, RedisOptions{Timeout: 2 * time.Second, ExpirySlack: time.Hour})
	defer s2.Close()
	// sent after the stalled one, so run after it
	if err := s2.Decide(ctx, oneToken("{stalled}"), &res); err != nil || res.Allowed {
		t.Fatalf("the next decision on the stalled one's bucket of one token: %v, allowed %v; want it spent by the stalled one", err, res.Allowed)
	}
}
