package bucket_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
)

// TestFullSubjectsRefuseCheaply: a memory store full of locks refuses a
// new one (ErrFull) rather than evict one in force. Each refusal swept the
// whole table under the store's write lock (7 ms at the default 262,144
// locks), so a flood of refused writes held every decision's read lock
// off; a refusal now sweeps only once an entry can have expired, and the
// table takes new locks again as soon as one has.
func TestFullSubjectsRefuseCheaply(t *testing.T) {
	t.Parallel()
	const table, refusals = 1 << 16, 1000
	now := t0
	s := bucket.NewMemoryStore(bucket.MemoryOptions{MaxSubjects: table, Now: func() time.Time { return now }})
	ctx := context.Background()
	lock := func(id string, until time.Time) error {
		return s.SetLock(ctx, bucket.Subject{Kind: "account", ID: id}, bucket.Lock{Kind: "lockout", Until: until})
	}
	for i := range table {
		if err := lock("a"+strconv.Itoa(i), t0.Add(time.Hour+time.Duration(i)*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for i := range refusals {
		if err := lock("b"+strconv.Itoa(i), t0.Add(time.Hour)); !errors.Is(err, bucket.ErrFull) {
			t.Fatalf("a lock past the bound: %v, want ErrFull", err)
		}
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("%d refused locks on a full table of %d took %v (%v each): each swept the table", refusals, table, d, d/refusals)
	}
	// the first lock ends: its room is taken again, and no other lock was lost
	now = t0.Add(time.Hour + time.Millisecond/2)
	if err := lock("late", t0.Add(2*time.Hour)); err != nil {
		t.Fatalf("no room once a lock expired: %v", err)
	}
	if _, ok, _ := s.GetLock(ctx, bucket.Subject{Kind: "account", ID: "a1"}); !ok {
		t.Fatal("a lock in force was dropped for room")
	}
}
