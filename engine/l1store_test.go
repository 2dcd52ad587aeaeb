package engine

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
)

// TestL1WrapForgetsLocks: a lock lifted through the wrapped store is seen
// by the next decision, not a TTL later (TestL1Locks: a lift behind the
// cache waits for the TTL).
func TestL1WrapForgetsLocks(t *testing.T) {
	t.Parallel()
	now := time.Unix(1700000000, 0)
	mem := bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return now }})
	store := &countingStore{Store: mem}
	l1 := NewL1(L1Options{TTL: time.Second})
	e := l1Engine(t, store, l1, &now)
	admin := l1.Wrap(mem)
	ctx := context.Background()
	alice := bucket.Subject{Kind: "account", ID: "alice"}
	in := Input{Endpoint: "POST /auth/login", IP: "192.0.2.1", Account: "alice", Cost: 0}
	decide := func() Outcome {
		t.Helper()
		var d Decision
		if err := e.Decide(ctx, &in, &d); err != nil {
			t.Fatal(err)
		}
		return d.Outcome
	}
	if err := admin.SetLock(ctx, alice, bucket.Lock{Kind: "lockout", Rule: "admin", Until: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if o := decide(); o != Locked {
		t.Fatalf("after SetLock: %v", o)
	}
	if o := decide(); o != Locked || store.calls.Load() != 1 {
		t.Fatalf("cached lock: %v, store calls %d", o, store.calls.Load())
	}
	// lifted through the cache: the cached lock is dropped at once
	if was, err := admin.ClearLock(ctx, alice); err != nil || !was {
		t.Fatalf("ClearLock = %v, %v", was, err)
	}
	if o := decide(); o != Allowed {
		t.Fatalf("after ClearLock through the cache: %v", o)
	}
	if (*L1)(nil).Wrap(mem) != bucket.Store(mem) {
		t.Fatal("a nil cache must return the store itself")
	}
}
