package bucket_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// hookClient runs a function once, after the next pipeline it executes
// that reads the key watched: a write interleaved between a listing's read
// of an entry and its pruning of the index.
type hookClient struct {
	*redis.Client
	mu    sync.Mutex
	watch string
	after func()
}

// arm makes after run once the next pipeline reading key has executed.
func (c *hookClient) arm(key string, after func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watch, c.after = key, after
}

func (c *hookClient) Pipeline() redis.Pipeliner {
	return &hookPipe{Pipeliner: c.Client.Pipeline(), c: c}
}

type hookPipe struct {
	redis.Pipeliner
	c    *hookClient
	hits bool
}

func (p *hookPipe) Get(ctx context.Context, key string) *redis.StringCmd {
	p.mark(key)
	return p.Pipeliner.Get(ctx, key)
}

func (p *hookPipe) HGet(ctx context.Context, key, field string) *redis.StringCmd {
	p.mark(key)
	return p.Pipeliner.HGet(ctx, key, field)
}

func (p *hookPipe) mark(key string) {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	p.hits = p.hits || key == p.c.watch
}

func (p *hookPipe) Exec(ctx context.Context) ([]redis.Cmder, error) {
	cmds, err := p.Pipeliner.Exec(ctx)
	p.c.mu.Lock()
	after := p.c.after
	if !p.hits || after == nil {
		after = nil
	} else {
		p.c.after = nil
	}
	p.c.mu.Unlock()
	if after != nil {
		after()
	}
	return cmds, err
}

// TestListDuringWrite (7.1): a listing read while a lock or multiplier is
// being written never drops it from the listing. Three interleavings,
// made deterministic:
//   - a write lands between a listing's read of an entry it finds gone
//     (an expired or lost lock, still indexed) and its pruning: the write
//     listed the entry again, so the pruning keeps it, and it stays listed
//     (re-asserting the same lock would never list it again);
//   - an index member without its entry (a writer that indexes before it
//     writes, of an older build) younger than the grace is neither listed
//     nor dropped, and is listed once its entry is written;
//   - a member without its entry older than the grace is pruned.
//
// The memory store lists its locks and multipliers from the entries
// themselves, under its lock: no listing can miss one being written.
func TestListDuringWrite(t *testing.T) {
	t.Parallel()
	rc, p := testenv.Redis(t)
	c := &hookClient{Client: rc}
	s := bucket.NewRedisStore(c, bucket.RedisOptions{Prefix: p})
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	until := time.Now().Add(time.Hour)
	lock := bucket.Lock{Kind: "lockout", Rule: "r", Until: until}
	alice := bucket.Subject{Kind: "account", ID: "alice"}
	lockKey, lockIdx := bucket.LockKey(p, "account", "alice"), p+"index:locks"
	old := float64(time.Now().Add(-time.Minute).UnixMilli())

	// alice's earlier lock is gone (Redis lost it) but still indexed;
	// riskd writes it again while a listing reads
	if err := rc.ZAdd(ctx, lockIdx, redis.Z{Score: old, Member: lockKey}).Err(); err != nil {
		t.Fatal(err)
	}
	c.arm(lockKey, func() {
		if err := s.SetLock(ctx, alice, lock); err != nil {
			t.Error(err)
		}
	})
	if locks, err := s.ListLocks(ctx, 100); err != nil || len(locks) != 0 {
		t.Fatalf("the listing that raced the write: %+v %v; want none listed", locks, err)
	}
	if err := s.SetLock(ctx, alice, lock); err != nil { // a re-assertion
		t.Fatal(err)
	}
	if locks, err := s.ListLocks(ctx, 100); err != nil || len(locks) != 1 || locks[0].Subject != alice {
		t.Fatalf("after the write: %+v %v; want alice's lock listed", locks, err)
	}

	// the same race for a multiplier
	ip := bucket.Subject{Kind: "ip", ID: "192.0.2.1"}
	multKey, multIdx := bucket.MultiplierKey(p, "ip", "192.0.2.1"), p+"index:multipliers"
	if err := rc.ZAdd(ctx, multIdx, redis.Z{Score: old, Member: multKey + "|admin"}).Err(); err != nil {
		t.Fatal(err)
	}
	m := bucket.Multiplier{Source: "admin", Value: 0.5, ExpiresAt: until, Reason: "why"}
	c.arm(multKey, func() {
		if err := s.SetMultiplier(ctx, ip, m); err != nil {
			t.Error(err)
		}
	})
	_, _ = s.ListMultipliers(ctx, 100)
	if err := s.SetMultiplier(ctx, ip, m); err != nil {
		t.Fatal(err)
	}
	if ms, err := s.ListMultipliers(ctx, 100); err != nil || len(ms) != 1 || ms[0].Subject != ip {
		t.Fatalf("after the multiplier's write: %+v %v; want it listed", ms, err)
	}

	// an index member whose entry is not written yet
	bob := bucket.Subject{Kind: "account", ID: "bob"}
	bobKey := bucket.LockKey(p, "account", "bob")
	now, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.ZAdd(ctx, lockIdx, redis.Z{Score: float64(now.UnixMilli()), Member: bobKey}).Err(); err != nil {
		t.Fatal(err)
	}
	if locks, _ := s.ListLocks(ctx, 100); len(locks) != 1 {
		t.Fatalf("bob listed before his lock is written: %+v", locks)
	}
	if err := rc.ZScore(ctx, lockIdx, bobKey).Err(); err != nil {
		t.Fatalf("the listing dropped bob's member while his lock was being written: %v", err)
	}
	// the writer of an older build writes the value after the index
	if err := rc.Set(ctx, bobKey, "lockout "+strconv.FormatInt(until.UnixMicro(), 10)+" - r", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if locks, _ := s.ListLocks(ctx, 100); len(locks) != 2 || locks[0].Subject != bob {
		t.Fatalf("after bob's lock is written: %+v; want bob newest, then alice", locks)
	}

	// a member without its entry, older than the grace, is pruned
	stale := bucket.LockKey(p, "account", "carol")
	if err := rc.ZAdd(ctx, lockIdx, redis.Z{Score: old, Member: stale}).Err(); err != nil {
		t.Fatal(err)
	}
	if locks, _ := s.ListLocks(ctx, 100); len(locks) != 2 {
		t.Fatalf("locks %+v", locks)
	}
	if err := rc.ZScore(ctx, lockIdx, stale).Err(); err != redis.Nil {
		t.Fatalf("a stale member is kept: %v", err)
	}
}
