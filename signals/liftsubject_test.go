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

// TestLiftClaimLock (7.1): a device rule fed by token-less reports locks
// the claim of the id; the lift of the claim, or of the device (the scope
// the limiter answers it with), forgets that lock and restarts the
// claim's counts, and a lift of the claim spares the proven device's lock.
func TestLiftClaimLock(t *testing.T) {
	t.Parallel()
	for _, lift := range []string{ClaimSubject, "device"} {
		rule := lockoutRule()
		rule.Name, rule.By, rule.Threshold = "device-failures", policy.PartDevice, 3
		e := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{rule}}})
		fail := func(s float64, attested bool) []Action {
			r := report(streams.ReportLoginFailed, "", sec(s))
			r.DeviceID, r.Attested = "d1", attested
			return e.ApplyReport(0, 0, r, nil)
		}
		for i := 0; i < 3; i++ {
			fail(float64(i), false)
			fail(float64(i), true)
		}
		if act := e.Active(sec(5)); len(act) != 2 {
			t.Fatalf("%s: before the lift, active %+v; want the claim's and the device's locks", lift, act)
		}
		if !e.LiftSubjectLock(lift, "d1", sec(10)) {
			t.Fatalf("%s: the lift lifted nothing", lift)
		}
		act := e.Active(sec(11))
		want := 0
		if lift == ClaimSubject {
			want = 1
		}
		if len(act) != want || want == 1 && act[0].Subject != "device" {
			t.Fatalf("%s: after the lift, active %+v", lift, act)
		}
		if acts := fail(20, false); len(acts) != 0 {
			t.Fatalf("%s: one new claim failure locked again: %+v", lift, acts)
		}
		fail(21, false)
		if acts := fail(22, false); len(acts) == 0 || acts[0].Subject != ClaimSubject {
			t.Fatalf("%s: three new claim failures did not lock the claim: %+v", lift, acts)
		}
	}
}
