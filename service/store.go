package service

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/bucket"
)

// storeConfig configures the store component: Redis, or the in-process
// memory store when RedisURL is "".
type storeConfig struct {
	// RedisURL is a --redis value ("" the memory store); RedisCA a PEM
	// file of CAs for rediss ("" the system roots).
	RedisURL, RedisCA string
	// Prefix starts every key the store builds.
	Prefix string
	// Timeout bounds each store call (the bucket store's deadline).
	Timeout time.Duration
	// Bounded makes the Redis client's dial, read and write timeouts
	// Timeout and turns its retries off, so every check answers within
	// the store timeout (6.6: the limiter). Unset, it retries twice
	// (riskd's writes).
	Bounded bool
	// Lanes is the Redis round trips in flight at once (0: the bucket's default).
	Lanes int
	// MemoryMaxKeys bounds the memory store (0: the bucket's default).
	MemoryMaxKeys int
	// SweepEvery is how often the memory store drops full buckets (default 10s).
	SweepEvery time.Duration
	// Logger logs the dial at start; Consequence says, in that log,
	// what an unreachable Redis means for the daemon.
	Logger      *slog.Logger
	Consequence string
}

// Validate checks the Redis URL and CA file and the bounds.
func (c storeConfig) Validate() error {
	if c.RedisURL == "" {
		if c.RedisCA != "" {
			return fmt.Errorf("service: redis CA file %s given without a redis URL", c.RedisCA)
		}
	} else if _, err := redisOptions(c.RedisURL, c.RedisCA); err != nil {
		return err
	}
	if c.Timeout < 0 || c.Lanes < 0 || c.MemoryMaxKeys < 0 {
		return fmt.Errorf("service: store timeout %v, lanes %d and memory max keys %d must not be negative", c.Timeout, c.Lanes, c.MemoryMaxKeys)
	}
	return nil
}

// storeComponent is the bucket store and, with Redis, its client. Run
// sweeps the memory store until ctx ends; on return the store and client
// are closed.
type storeComponent struct {
	store  bucket.Store
	memory *bucket.MemoryStore
	redis  *bucket.RedisStore
	client redis.UniversalClient // nil for the memory store
	every  time.Duration
}

var _ component = (*storeComponent)(nil)

// newStore validates c and opens the store. With Redis it pings once and
// logs a failure with its cause: the daemon starts anyway.
func newStore(ctx context.Context, c storeConfig) (*storeComponent, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	s := &storeComponent{every: c.SweepEvery}
	if s.every <= 0 {
		s.every = defaultSweepEvery
	}
	if c.RedisURL == "" {
		s.memory = bucket.NewMemoryStore(bucket.MemoryOptions{MaxKeys: c.MemoryMaxKeys, Prefix: c.Prefix})
		s.store = s.memory
		return s, nil
	}
	quietRedis(c.Logger)
	opts, err := redisOptions(c.RedisURL, c.RedisCA)
	if err != nil {
		return nil, err
	}
	if c.Bounded {
		// Every check answers within the store timeout (6.6): the client
		// honours the decision's deadline, and no dial, read or write
		// outlasts it.
		opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = c.Timeout, c.Timeout, c.Timeout
		opts.ContextTimeoutEnabled = true
		opts.MaxRetries = -1
	} else {
		opts.MaxRetries = 2
	}
	s.client = redis.NewUniversalClient(opts)
	dialRedisOnce(ctx, c.Logger, s.client, c.RedisURL, c.Consequence)
	s.redis = bucket.NewRedisStore(s.client, bucket.RedisOptions{Timeout: c.Timeout, Lanes: c.Lanes, Cluster: opts.IsClusterMode, Prefix: c.Prefix})
	s.store = s.redis
	return s, nil
}

// Run sweeps the memory store every 10s (Redis expires keys itself)
// until ctx ends, then closes the store and the client.
func (s *storeComponent) Run(ctx context.Context) error {
	if s.memory != nil {
		t := time.NewTicker(s.every)
		defer t.Stop()
		for {
			select {
			case now := <-t.C:
				s.memory.Sweep(now)
			case <-ctx.Done():
				return nil
			}
		}
	}
	<-ctx.Done()
	_ = s.redis.Close() // never fails: it stops the lanes
	if err := s.client.Close(); err != nil {
		return fmt.Errorf("close redis client: %w", err)
	}
	return nil
}

// ping reports "up" or "down" for /readyz ("disabled" without Redis).
func (s *storeComponent) ping(ctx context.Context) (string, error) {
	if s.client == nil {
		return "disabled", nil
	}
	// riskd's client ignores a context's deadline (it is not Bounded: its
	// reads wait ReadTimeout, with retries), so a paused Redis would hold
	// /readyz for seconds past its deadline: wait for the ping only until
	// ctx ends. The ping's goroutine ends within the client's own timeouts,
	// as the request would have.
	done := make(chan error, 1)
	go func() { done <- s.client.Ping(ctx).Err() }()
	select {
	case err := <-done:
		if err != nil {
			return "down", err
		}
		return "up", nil
	case <-ctx.Done():
		return "down", ctx.Err()
	}
}

// redisLog sends go-redis's internal log lines (dial failures during an
// outage, one per attempt) to slog at debug level instead of stderr.
type redisLog struct{ l *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...interface{}) {
	r.l.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}

var redisLogOnce sync.Once

// quietRedis installs redisLog once per process (go-redis's logger is global).
func quietRedis(l *slog.Logger) {
	redisLogOnce.Do(func() { redis.SetLogger(redisLog{l}) })
}
