package signals

import (
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
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

// TestLiftReplayedAfterLaterReportsSlotted: riskd's restart replays the
// reports before it reads the audit stream, so a lift reaches a slotted
// counter (threshold over 64) after the reports that followed it. The
// counter then drops every slot up to the lift's, as the live engine
// dropped them all when the lift came: the reports counted while the
// lock was in force do not lock the ip again after a few new failures
// (6.5: only `threshold` new ones do). Before, the replayed counter kept
// the 80 failures made during the lock, and 20 new ones locked again.
func TestLiftReplayedAfterLaterReportsSlotted(t *testing.T) {
	t.Parallel()
	rule := policy.VelocityRule{Name: "ip-lock", Event: streams.ReportLoginFailed, By: policy.PartIP,
		Threshold: 100, Window: 10 * time.Minute, Action: "lockout", Duration: 15 * time.Minute}
	fail := func(s float64) *streams.Report { return failedFrom("192.0.2.7", sec(s)) }
	for _, order := range []string{"live", "replayed"} {
		t.Run(order, func(t *testing.T) {
			t.Parallel()
			e := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{rule}}})
			locks := 0
			apply := func(r *streams.Report) {
				for _, a := range e.ApplyReport(0, 0, r, nil) {
					if a.Kind == SetLock {
						locks++
					}
				}
			}
			for i := 0; i < 100; i++ { // locked at 99 s
				apply(fail(float64(i)))
			}
			for i := 0; i < 80; i++ { // failures while locked
				apply(fail(100 + float64(i)))
			}
			lift := func() {
				if !e.LiftSubjectLock("ip", "192.0.2.7", sec(200)) {
					t.Fatal("the lift found no lock in force")
				}
			}
			if order == "live" {
				lift()
			}
			apply(fail(215)) // a new failure after the lift
			if order == "replayed" {
				lift() // the audit stream is read after the reports
			}
			for i := 0; i < 19; i++ {
				apply(fail(216 + float64(i)))
			}
			if locks != 1 {
				t.Fatalf("20 new failures after the lift (threshold 100): %d lockouts, want 1 (the first)", locks)
			}
		})
	}
}
