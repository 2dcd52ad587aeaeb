package risk_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/risk"
)

// TestLease: one holder at a time; a holder that stops releases the lease
// and another acquires it; a lease taken over underneath its holder makes
// Hold return at the next renewal.
func TestLease(t *testing.T) {
	t.Parallel()
	c, prefix := testenv.Redis(t)
	key := prefix + "leader"
	a := risk.NewLease(c, key, "a", 300*time.Millisecond)
	b := risk.NewLease(c, key, "b", 300*time.Millisecond)
	ctx := context.Background()
	if err := a.Acquire(ctx, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	if err := b.Acquire(short, 10*time.Millisecond); err == nil {
		t.Fatal("b acquired a lease a holds")
	}
	cancel()
	// a holds (renews) and then stops: the lease is released at once
	hctx, stop := context.WithCancel(ctx)
	held := make(chan error, 1)
	go func() { held <- a.Hold(hctx) }()
	stop()
	if err := <-held; err != nil {
		t.Fatalf("Hold after stop: %v", err)
	}
	if v, _ := c.Get(ctx, key).Result(); v != "" {
		t.Fatalf("lease still held by %q after release", v)
	}
	if err := b.Acquire(ctx, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// someone else takes the key: b's next renewal fails and Hold returns
	go func() { held <- b.Hold(ctx) }()
	c.Set(ctx, key, "intruder", time.Minute)
	select {
	case err := <-held:
		if err == nil {
			t.Fatal("Hold returned nil after losing the lease")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Hold did not notice the lost lease")
	}
}
