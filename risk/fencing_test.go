package risk_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/risk"
	"github.com/tollgate-dev/tollgate/streams"
)

// pausingStore is a Redis store whose first lock write waits for resume
// after the daemon asked the lease (a riskd paused between that check and
// the write: SIGSTOP, a VM frozen, a long GC), then goes on with the
// context it was given, as the process would on waking.
type pausingStore struct {
	*bucket.RedisStore
	once    sync.Once
	paused  chan struct{}
	resume  chan struct{}
	written chan error
}

func (s *pausingStore) SetLock(ctx context.Context, sub bucket.Subject, l bucket.Lock) error {
	first := false
	s.once.Do(func() { first = true })
	if !first {
		return s.RedisStore.SetLock(ctx, sub, l)
	}
	close(s.paused)
	<-s.resume
	err := s.RedisStore.SetLock(ctx, sub, l)
	s.written <- err
	return err
}

// TestPausedLeaderWritesNothingAfterItsLease (7.5): a leader paused
// between asking its lease and writing a lock wakes after the lease has
// passed to another riskd (which may have acted since: an admin lift, a
// newer lock). Its write must not reach Redis: every store write of the
// daemon carries a context that ends when the lease's time to act does.
// Before, the woken leader wrote its lock 1 s after its lease ended, with
// the other riskd holding it.
func TestPausedLeaderWritesNothingAfterItsLease(t *testing.T) {
	t.Parallel()
	ns := testenv.StartNATS(t)
	pub := replayPublisher(t, ns.URL)
	ctx := context.Background()
	if err := streams.EnsureStreams(ctx, pub.JetStream(), streams.Config{}); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse("p.yaml", []byte(twoRulesPolicy))
	if err != nil {
		t.Fatal(err)
	}
	rdb, prefix := testenv.Redis(t)
	store := &pausingStore{RedisStore: bucket.NewRedisStore(rdb, bucket.RedisOptions{Prefix: prefix, Timeout: 2 * time.Second}),
		paused: make(chan struct{}), resume: make(chan struct{}), written: make(chan error, 1)}
	const ttl = 600 * time.Millisecond
	a := risk.NewLease(rdb, prefix+"leader", "riskd-a", ttl)
	if err := a.Acquire(ctx, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	d, err := risk.New(risk.Options{Publisher: pub, Store: store, Policy: func() *policy.Policy { return p },
		Logger: slog.New(slog.DiscardHandler), Leading: a.Valid, LeadingUntil: a.Until})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- d.Run(rctx) }()
	<-d.Ready()
	for i := 0; i < 2; i++ {
		r := streams.Report{V: 1, ID: fmt.Sprint("f", i), TS: time.Now().UTC(), Type: streams.ReportLoginFailed, Source: "api", Account: "frank"}
		if err := pub.Report(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-store.paused:
	case err := <-ran:
		t.Fatalf("daemon stopped: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the lock write never came")
	}
	// the pause: a's lease is not renewed and passes to b
	b := risk.NewLease(rdb, prefix+"leader", "riskd-b", ttl)
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := b.Acquire(actx, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	close(store.resume)
	werr := <-store.written
	locks, err := store.RedisStore.Locks(ctx, bucket.Subject{Kind: "account", ID: "frank"})
	if err != nil {
		t.Fatal(err)
	}
	if len(locks) != 0 || werr == nil {
		t.Fatalf("the paused leader wrote after its lease passed to another riskd: write error %v, locks %+v", werr, locks)
	}
}
