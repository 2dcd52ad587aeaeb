package signals_test

import (
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/signals"
	"github.com/tollgate-dev/tollgate/streams"
)

// TestClassLockMeasuresKeptApart: the lock of a velocity rule restricted
// to classes is its own measure (Lock.Own, compared only with the lock of
// its own key): an otp-flood lockout neither replaces nor keeps out the
// login lockout of the same account, whichever fires first; both are
// re-asserted, a step_up_passed lifts only step-ups, and an admin lift
// forgets both.
func TestClassLockMeasuresKeptApart(t *testing.T) {
	t.Parallel()
	p, err := policy.Parse("p.yaml", []byte(`version: 1
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "POST /otp",        class: otp}
  - {match: "POST /pay",        class: pay}
limits:
  - {name: all, by: [ip], rate: 1000/min}
risk:
  velocity:
    - {name: account-failures, event: login_failed, by: account, threshold: 3, window: 10m, action: lockout, duration: 15m}
    - {name: otp-flood, event: otp_sent, by: account, threshold: 3, window: 10m, action: lockout, duration: 1h, classes: [otp]}
    - {name: pay-step, event: payment_declined, by: account, threshold: 3, window: 10m, action: step_up, duration: 1h, classes: [pay]}
`))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	for _, first := range []string{"login_failed", "otp_sent"} {
		t.Run(first, func(t *testing.T) {
			t.Parallel()
			e := signals.New(signals.Options{Risk: p.Risk, Limits: p.Limits})
			seq := uint64(0)
			at := t0
			flood := func(typ string) []signals.Action {
				var locks []signals.Action
				for i := 0; i < 3; i++ {
					seq++
					at = at.Add(time.Second)
					for _, a := range e.ApplyReport(seq, 0, &streams.Report{Type: typ, TS: at, Account: "alice"}, nil) {
						if a.Kind == signals.SetLock || a.Kind == signals.ClearLock {
							locks = append(locks, a)
						}
					}
				}
				return locks
			}
			want := map[string]struct {
				rule string
				own  bool
			}{"login_failed": {"account-failures", false}, "otp_sent": {"otp-flood", true}}
			second := map[string]string{"login_failed": "otp_sent", "otp_sent": "login_failed"}[first]
			for _, typ := range []string{first, second} {
				locks := flood(typ)
				w := want[typ]
				if len(locks) != 1 || locks[0].Kind != signals.SetLock || locks[0].Lock.Rule != w.rule || locks[0].Lock.Own != w.own {
					t.Fatalf("after %s: lock actions %+v; want one SetLock by %s (own %v)", typ, locks, w.rule, w.own)
				}
			}
			if act := e.Active(at); len(act) != 2 || act[0].Lock.Rule != "account-failures" || act[1].Lock.Rule != "otp-flood" || !act[1].Lock.Own {
				t.Fatalf("Active = %+v; want both locks", act)
			}
			// a step-up kept apart is lifted by step_up_passed, and only it
			if locks := flood("payment_declined"); len(locks) != 1 || locks[0].Lock.Kind != "step_up" || !locks[0].Lock.Own {
				t.Fatalf("pay-step: %+v", locks)
			}
			seq++
			acts := e.ApplyReport(seq, 0, &streams.Report{Type: "step_up_passed", TS: at.Add(time.Second), Account: "alice"}, nil)
			var cleared []signals.Action
			for _, a := range acts {
				if a.Kind == signals.ClearLock {
					cleared = append(cleared, a)
				}
			}
			if len(cleared) != 1 || cleared[0].Lock.Rule != "pay-step" || !cleared[0].Lock.Own {
				t.Fatalf("step_up_passed: %+v; want the pay-step lock cleared alone", acts)
			}
			if act := e.Active(at.Add(time.Second)); len(act) != 2 {
				t.Fatalf("Active after step_up_passed = %+v; want the two lockouts", act)
			}
			if !e.LiftSubjectLock("account", "alice", at.Add(2*time.Second)) {
				t.Fatal("LiftSubjectLock: no lock in force")
			}
			if act := e.Active(at.Add(2 * time.Second)); len(act) != 0 {
				t.Fatalf("Active after the lift = %+v; want none", act)
			}
		})
	}
}
