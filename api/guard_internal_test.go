package api

import (
	"fmt"
	"testing"
	"time"
)

// TestGuardFullKeepsBlocked: the failed-token throttle's table holds
// adminMaxTracked addresses. Filling it with one failure from each of many
// other addresses (an IPv6 /48 holds 65,536 /64 clients) evicted entries
// at random, a blocked address among them, which could then guess again
// at once. Now the table evicts expired entries, then the unblocked ones
// with the fewest failures, and a blocked address stays blocked for its
// minute.
func TestGuardFullKeepsBlocked(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g := newAdminGuard(func() time.Time { return now })
	const attacker = "2001:db8:0:1::/64"
	for range adminMaxFailures {
		g.fail(attacker)
	}
	if _, b := g.blocked(attacker); !b {
		t.Fatal("not blocked after its failures")
	}
	for i := range 3 * adminMaxTracked {
		g.fail(fmt.Sprintf("2001:db8:1:%x::/64", i))
	}
	if n := len(g.by); n > adminMaxTracked {
		t.Fatalf("%d addresses tracked, over the bound of %d", n, adminMaxTracked)
	}
	if _, b := g.blocked(attacker); !b {
		t.Fatalf("%d single failures from other addresses unblocked a blocked address", 3*adminMaxTracked)
	}
	// its minute still ends
	now = now.Add(adminWindow)
	if _, b := g.blocked(attacker); b {
		t.Fatal("still blocked after its window")
	}
}
