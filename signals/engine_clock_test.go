package signals

import (
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/policy"
)

// TestClockAheadSweepsNothing: one report from a host whose clock runs an
// hour ahead moves the engine's clock only to its stream time plus
// MaxClockSkew (BoundClock), so it neither sweeps an account's live
// failure count (the 10th failure still locks) nor a lockout in force
// out of Active.
func TestClockAheadSweepsNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		bound bool // BoundClock called with each event's stream time
		want  bool // the engine gets it right
	}{
		{"bounded by stream time", true, true},
		{"unbounded", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{lockoutRule()}}})
			seq := uint64(0)
			apply := func(account string, ts, arrived time.Time) []Action {
				seq++
				if tc.bound {
					e.BoundClock(arrived)
				}
				return e.ApplyReport(seq, 0, failed(account, ts), nil)
			}
			for i := 0; i < 9; i++ {
				apply("alice", sec(float64(i)), sec(float64(i)))
			}
			apply("bob", sec(10).Add(time.Hour), sec(10)) // the fast host
			for i := 0; i < 50; i++ {                     // other traffic: the sweeper looks at every key
				apply("carol", sec(11+float64(i)/100), sec(11))
			}
			locked := false
			for _, a := range apply("alice", sec(20), sec(20)) {
				locked = locked || a.Kind == SetLock
			}
			if locked != tc.want {
				t.Errorf("alice's 10th failure locked: %v, want %v", locked, tc.want)
			}
			// a lockout in force: alice locked (by ten new failures, the
			// first run's or these), then the fast host and more traffic
			for i := 0; i < 10; i++ {
				apply("dave", sec(21+float64(i)), sec(21+float64(i)))
			}
			apply("bob", sec(32).Add(2*time.Hour), sec(32))
			for i := 0; i < 50; i++ {
				apply("carol", sec(40+float64(i)/100), sec(40))
			}
			found := false
			for _, a := range e.Active(sec(60)) {
				found = found || a.Kind == SetLock && a.ID == "dave"
			}
			if found != tc.want {
				t.Fatalf("dave's lockout in force is in Active: %v, want %v", found, tc.want)
			}
		})
	}
}

// TestSkewedHostCountsNearStreamTime: a report stamped further than
// MaxClockSkew from its stream time counts at the nearer end of that
// range. One report an hour ahead no longer blinds the account's window
// to the real failures after it, and ten from a host 20 minutes behind
// lock until about 14 minutes after the stream time, not until 5 minutes
// before it.
func TestSkewedHostCountsNearStreamTime(t *testing.T) {
	t.Parallel()
	t.Run("ahead", func(t *testing.T) {
		t.Parallel()
		e := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{lockoutRule()}}})
		e.BoundClock(sec(0))
		e.ApplyReport(0, 0, failed("alice", sec(0).Add(time.Hour)), nil)
		var lock *Action
		for i := 1; i <= 30 && lock == nil; i++ {
			e.BoundClock(sec(float64(i)))
			for _, a := range e.ApplyReport(0, 0, failed("alice", sec(float64(i))), nil) {
				if a.Kind == SetLock {
					lock = &a
				}
			}
		}
		if lock == nil {
			t.Fatal("31 failures, one stamped an hour ahead: no lockout")
		}
	})
	t.Run("behind", func(t *testing.T) {
		t.Parallel()
		e := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{lockoutRule()}}})
		var until time.Time
		for i := 0; i < 10; i++ {
			stream := sec(3600 + float64(i))
			e.BoundClock(stream)
			for _, a := range e.ApplyReport(0, 0, failed("alice", stream.Add(-20*time.Minute)), nil) {
				if a.Kind == SetLock {
					until = a.Lock.Until
				}
			}
		}
		if want := sec(3609).Add(14 * time.Minute); !until.Equal(want) {
			t.Fatalf("lockout until %v, want %v (stream time - 1m + 15m)", until, want)
		}
	})
}
