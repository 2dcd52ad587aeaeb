package signals

import (
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/policy"
)

// TestLiftLockResetsCounts (6.5): after an admin lift the account is not
// locked again until the threshold of new failures; the lifted lock is not
// re-asserted; a failure stamped before the lift that arrives after it
// does not count; a lock set after the lift is kept.
func TestLiftLockResetsCounts(t *testing.T) {
	t.Parallel()
	rule := lockoutRule()
	rule.Threshold = 3
	e := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{rule}}})
	var acts []Action
	for i := 0; i < 3; i++ {
		acts = e.ApplyReport(0, 0, failed("dave", sec(float64(i))), acts[:0])
	}
	if got := summary(acts); got == "" || len(e.Active(sec(3))) != 1 {
		t.Fatalf("3rd failure: %q, active %d", got, len(e.Active(sec(3))))
	}
	if !e.LiftLock("dave", sec(10)) {
		t.Fatal("LiftLock found no lock in force")
	}
	if a := e.Active(sec(11)); len(a) != 0 {
		t.Fatalf("lifted lock still active: %+v", a)
	}
	// A failure from before the lift, delivered late, and two new ones:
	// still under the threshold of 3 new failures.
	acts = e.ApplyReport(0, 0, failed("dave", sec(9)), acts[:0])
	for i := 0; i < 2; i++ {
		acts = e.ApplyReport(0, 0, failed("dave", sec(float64(20+i))), acts)
	}
	if got := summary(acts); got != "" {
		t.Fatalf("locked again before 3 new failures: %s", got)
	}
	acts = e.ApplyReport(0, 0, failed("dave", sec(30)), acts[:0])
	if got := summary(acts); got == "" {
		t.Fatal("3 new failures after the lift did not lock")
	}
	// A lift stamped before that lock (an old audit event replayed) keeps it.
	if e.LiftLock("dave", sec(15)) || len(e.Active(sec(31))) != 1 {
		t.Fatal("a lift older than the lock removed it")
	}
	if e.LiftLock("", sec(40)) || e.LiftLock("dave", time.Time{}) {
		t.Fatal("empty account or zero time lifted something")
	}
}
