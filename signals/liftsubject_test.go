package signals

import (
	"testing"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// TestLiftSubjectLock (7.1): an admin lift of an ip lock is sticky like an
// account's (6.5): the lock is forgotten (never re-asserted), the
// address's counts restart, and a lift of another subject kind or id
// lifts nothing.
func TestLiftSubjectLock(t *testing.T) {
	t.Parallel()
	rule := lockoutRule()
	rule.Name, rule.By, rule.Threshold = "ip-failures", policy.PartIP, 2
	e := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{rule}}})
	fail := func(s float64) []Action {
		r := report(streams.ReportLoginFailed, "", sec(s))
		r.IP = "192.0.2.5"
		return e.ApplyReport(0, 0, r, nil)
	}
	fail(0)
	if acts := fail(1); len(acts) != 2 || acts[0].Subject != "ip" || acts[0].ID != "192.0.2.5" {
		t.Fatalf("2nd failure: %+v", acts)
	}
	if e.LiftSubjectLock("account", "192.0.2.5", sec(5)) || e.LiftSubjectLock("ip", "192.0.2.6", sec(5)) {
		t.Fatal("a lift of another subject lifted the address's lock")
	}
	if !e.LiftSubjectLock("ip", "192.0.2.5", sec(10)) || len(e.Active(sec(11))) != 0 {
		t.Fatalf("lift: still active %+v", e.Active(sec(11)))
	}
	if acts := fail(20); len(acts) != 0 {
		t.Fatalf("one new failure locked again: %+v", acts)
	}
	if acts := fail(21); len(acts) != 2 {
		t.Fatalf("two new failures did not lock: %+v", acts)
	}
}
