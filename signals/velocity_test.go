package signals

import (
	"reflect"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

func TestVelocityThreshold(t *testing.T) {
	t.Parallel()
	type ev struct {
		account string
		at      time.Duration
	}
	seq := func(account string, from, step time.Duration, n int) []ev {
		var evs []ev
		for i := range n {
			evs = append(evs, ev{account, from + time.Duration(i)*step})
		}
		return evs
	}
	cat := func(parts ...[]ev) []ev {
		var all []ev
		for _, p := range parts {
			all = append(all, p...)
		}
		return all
	}
	tests := []struct {
		name  string
		rule  func(*policy.VelocityRule)
		evs   []ev
		fired []int // indexes of the events that fire
	}{
		{name: "nine failures do not fire", evs: seq("alice", 0, time.Minute, 9)},
		{name: "the tenth failure fires", evs: seq("alice", 0, time.Second, 12), fired: []int{9}},
		{name: "tenth just inside the window", evs: cat(seq("alice", 0, time.Minute, 9),
			[]ev{{"alice", 10*time.Minute - time.Nanosecond}}), fired: []int{9}},
		{name: "oldest exactly window old has slid out", evs: cat(seq("alice", 0, time.Minute, 9),
			[]ev{{"alice", 10 * time.Minute}}, []ev{{"alice", 10*time.Minute + 30*time.Second}}), fired: []int{10}},
		{name: "spread over more than the window never fires", evs: seq("alice", 0, 70*time.Second, 30)},
		{name: "other keys do not count", evs: cat(seq("alice", 0, time.Second, 5), seq("bob", 10*time.Second, time.Second, 5),
			seq("alice", 20*time.Second, time.Second, 5)), fired: []int{14}},
		{name: "out of order within the window", evs: []ev{{"alice", 9 * time.Second}, {"alice", 3 * time.Second},
			{"alice", 8 * time.Second}, {"alice", 1 * time.Second}, {"alice", 7 * time.Second}, {"alice", 2 * time.Second},
			{"alice", 6 * time.Second}, {"alice", 5 * time.Second}, {"alice", 4 * time.Second}, {"alice", 0}}, fired: []int{9}},
		{name: "no refire while locked, counts resume after", evs: cat(
			seq("alice", 0, time.Second, 10),                         // fires at 9s, locked until 15m9s
			seq("alice", 10*time.Minute, time.Second, 10),            // counted, locked: no fire
			[]ev{{"alice", 15*time.Minute + 10*time.Second}}), fired: []int{9, 20}}, // 11 in window, lock over
		{name: "window cleared after firing", rule: func(r *policy.VelocityRule) { r.Duration = time.Second },
			evs: seq("alice", 0, time.Minute/6, 25), fired: []int{9, 19}},
		{name: "empty key value does not count", evs: seq("", 0, time.Second, 20)},
		{name: "slotted counter for large thresholds", rule: func(r *policy.VelocityRule) {
			r.Threshold, r.Window = 100, 64*time.Second
		}, evs: cat(seq("alice", 0, 10*time.Millisecond, 99), seq("alice", 70*time.Second, 10*time.Millisecond, 100)),
			fired: []int{198}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rule := lockoutRule()
			if tc.rule != nil {
				tc.rule(&rule)
			}
			e := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{rule}}})
			var rs []*streams.Report
			for _, ev := range tc.evs {
				rs = append(rs, failed(ev.account, at(ev.at)))
			}
			per := applyReports(e, rs)
			if got := firedAt(per); !equalInts(got, tc.fired) {
				t.Fatalf("fired at %v, want %v", got, tc.fired)
			}
			for _, i := range tc.fired {
				if got := summary(per[i]); got != "SetLock account/alice lockout; Alert lockout account/alice" {
					t.Errorf("event %d: actions %s", i, got)
				}
			}
		})
	}
}

func TestLockoutActionFields(t *testing.T) {
	t.Parallel()
	e := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{lockoutRule()}}})
	var acts []Action
	for i := range 10 {
		acts = e.ApplyReport(uint64(i+1), 0, failed("alice", at(time.Duration(i)*time.Second)), acts)
	}
	fire := at(9 * time.Second)
	until := fire.Add(15 * time.Minute)
	want := []Action{
		{Kind: SetLock, Subject: "account", ID: "alice",
			Lock: bucket.Lock{Kind: "lockout", Rule: "account-failures", Until: until}},
		{Kind: Alert, Subject: "account", ID: "alice", Alert: streams.Alert{
			V:          streams.SchemaVersion,
			ID:         "lockout:account-failures:account:alice:1713520809000",
			TS:         fire,
			Kind:       "lockout",
			Subject:    "account",
			SubjectID:  "alice",
			Rule:       "account-failures",
			Multiplier: 1,
			Rate:       10.0 / 600,
			Baseline:   10.0 / 600,
			ExpiresAt:  until,
			Reason:     "account alice: 10 login_failed in 10m (threshold 10, rule account-failures); locked out for 15m",
			Count:      10,
		}},
	}
	if !reflect.DeepEqual(acts, want) {
		t.Fatalf("actions:\n got %+v\nwant %+v", acts, want)
	}
}

func TestStepUp(t *testing.T) {
	t.Parallel()
	stepUp := lockoutRule()
	stepUp.Name, stepUp.Action, stepUp.Threshold = "account-step-up", "step_up", 3
	lockout := lockoutRule()
	lockout.By, lockout.Name, lockout.Threshold = policy.PartUser, "user-lockout", 3
	e := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{stepUp, lockout}}})

	var acts []Action
	for i := range 3 {
		acts = e.ApplyReport(0, 0, failed("alice", sec(float64(i))), nil)
	}
	if got := summary(acts); got != "SetLock account/alice step_up; Alert step_up account/alice" {
		t.Fatalf("third failure: %s", got)
	}
	if a := acts[1].Alert; a.Kind != streams.AlertStepUp || a.Multiplier != 1 || a.ID != "step_up:account-step-up:account:alice:1713520802000" {
		t.Fatalf("alert %+v", a)
	}
	mustNotFire(t, "step_up_passed for bob", e.ApplyReport(0, 0, report(streams.ReportStepUpPassed, "bob", sec(5)), nil))
	acts = e.ApplyReport(0, 0, report(streams.ReportStepUpPassed, "alice", sec(6)), nil)
	want := []Action{{Kind: ClearLock, Subject: "account", ID: "alice"}}
	if !reflect.DeepEqual(acts, want) {
		t.Fatalf("step_up_passed: %+v, want %+v", acts, want)
	}
	mustNotFire(t, "second step_up_passed", e.ApplyReport(0, 0, report(streams.ReportStepUpPassed, "alice", sec(7)), nil))
	if got := e.Active(sec(8)); len(got) != 0 {
		t.Fatalf("Active after clearing: %s", summary(got))
	}
	// Lifted: the rule may fire again within the original duration.
	for i := range 3 {
		acts = e.ApplyReport(0, 0, failed("alice", sec(float64(10+i))), nil)
	}
	if got := summary(acts); got != "SetLock account/alice step_up; Alert step_up account/alice" {
		t.Fatalf("after clearing, third failure: %s", got)
	}

	// A lockout (here on a user) is not lifted by step_up_passed, even for
	// an account of the same name.
	for i := range 3 {
		r := failed("", sec(float64(20+i)))
		r.UserID = "carol"
		acts = e.ApplyReport(0, 0, r, nil)
	}
	if got := summary(acts); got != "SetLock user/carol lockout; Alert lockout user/carol" {
		t.Fatalf("user lockout: %s", got)
	}
	mustNotFire(t, "step_up_passed for a locked-out user", e.ApplyReport(0, 0, report(streams.ReportStepUpPassed, "carol", sec(30)), nil))
}

func TestStepUpDoesNotLiftLockout(t *testing.T) {
	t.Parallel()
	lockout := lockoutRule()
	lockout.Threshold = 3
	stepUp := lockoutRule()
	stepUp.Name, stepUp.Action, stepUp.Threshold, stepUp.Duration = "account-step-up", "step_up", 2, time.Minute
	e := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{lockout, stepUp}}})
	var per [][]Action
	for i := range 3 {
		per = append(per, e.ApplyReport(0, 0, failed("alice", sec(float64(i))), nil))
	}
	if got := summary(per[1]); got != "SetLock account/alice step_up; Alert step_up account/alice" {
		t.Fatalf("second failure: %s", got)
	}
	if got := summary(per[2]); got != "SetLock account/alice lockout; Alert lockout account/alice" {
		t.Fatalf("third failure: %s", got)
	}
	// The step-up rule fires again; its lock must not replace the lockout.
	var acts []Action
	for i := range 2 {
		acts = e.ApplyReport(0, 0, failed("alice", sec(float64(70+i))), acts)
	}
	if got := summary(acts); got != "Alert step_up account/alice" {
		t.Fatalf("step-up over a lockout: %s", got)
	}
	mustNotFire(t, "step_up_passed during a lockout", e.ApplyReport(0, 0, report(streams.ReportStepUpPassed, "alice", sec(80)), nil))
	if got := summary(e.Active(sec(81))); got != "SetLock account/alice lockout" {
		t.Fatalf("Active: %s", got)
	}
}

func TestTighten(t *testing.T) {
	t.Parallel()
	rule := policy.VelocityRule{Name: "ip-spray", Event: streams.ReportLoginFailed, By: policy.PartIP, Threshold: 50,
		Window: 10 * time.Minute, Action: "tighten", Multiplier: 0.1, Duration: 30 * time.Minute}
	e := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{rule}}})
	var acts []Action
	for i := range 50 {
		r := failed("user"+string(rune('a'+i%26)), sec(float64(i)))
		r.IP = "192.0.2.1"
		acts = e.ApplyReport(0, 0, r, nil)
		if i < 49 && len(acts) > 0 {
			t.Fatalf("failure %d fired: %s", i+1, summary(acts))
		}
	}
	fire := sec(49)
	until := fire.Add(30 * time.Minute)
	if len(acts) != 2 {
		t.Fatalf("actions: %s", summary(acts))
	}
	wantM := Action{Kind: SetMultiplier, Subject: "ip", ID: "192.0.2.1", Multiplier: bucket.Multiplier{
		Source: "velocity", Value: 0.1, ExpiresAt: until, Reason: "ip-spray: 50 login_failed in 10m"}}
	if !reflect.DeepEqual(acts[0], wantM) {
		t.Fatalf("multiplier:\n got %+v\nwant %+v", acts[0], wantM)
	}
	a := acts[1].Alert
	if a.Kind != "tighten" || a.Subject != "ip" || a.SubjectID != "192.0.2.1" || a.Rule != "ip-spray" ||
		a.Multiplier != 0.1 || a.Count != 50 || a.Rate != 50.0/600 || a.Baseline != 50.0/600 ||
		!a.ExpiresAt.Equal(until) || !a.TS.Equal(fire) || a.ID != "tighten:ip-spray:ip:192.0.2.1:1713520849000" {
		t.Fatalf("alert %+v", a)
	}
}

func TestEscalation(t *testing.T) {
	t.Parallel()
	rule := lockoutRule()
	rule.Threshold = 1
	rule.Escalate = &policy.Escalate{Factor: 2, Max: time.Hour}
	e := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{rule}}})
	steps := []struct {
		at   time.Duration
		want time.Duration // 0: must not fire (lock in force)
	}{
		{0, 15 * time.Minute},
		{10 * time.Minute, 0}, // locked until 15m
		{20 * time.Minute, 30 * time.Minute},
		{time.Hour, time.Hour},
		{2*time.Hour + 10*time.Minute, time.Hour}, // 15m x 8 capped at 1h
		{3*time.Hour + 20*time.Minute, time.Hour},
		// 24 h quiet after the last firing (3h20m): back to the base duration.
		{27*time.Hour + 20*time.Minute, 15 * time.Minute},
		{27*time.Hour + 40*time.Minute, 30 * time.Minute},
	}
	for _, s := range steps {
		acts := e.ApplyReport(0, 0, failed("alice", at(s.at)), nil)
		if s.want == 0 {
			mustNotFire(t, "while locked", acts)
			continue
		}
		if len(acts) != 2 || acts[0].Kind != SetLock {
			t.Fatalf("at %v: %s", s.at, summary(acts))
		}
		if got := acts[0].Lock.Until.Sub(at(s.at)); got != s.want {
			t.Errorf("at %v: lock for %v, want %v", s.at, got, s.want)
		}
		if !acts[1].Alert.ExpiresAt.Equal(acts[0].Lock.Until) {
			t.Errorf("at %v: alert expires %v, lock until %v", s.at, acts[1].Alert.ExpiresAt, acts[0].Lock.Until)
		}
	}
}

func TestDedupe(t *testing.T) {
	t.Parallel()
	rule := lockoutRule()
	rule.Threshold = 3
	e := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{rule}}})
	steps := []struct {
		seq   uint64
		index int
		fires bool
	}{
		{5, 0, false}, // 1
		{5, 0, false}, // redelivered: ignored
		{4, 9, false}, // older message: ignored
		{5, 1, false}, // 2
		{5, 1, false}, // ignored
		{6, 0, true},  // 3: fires
	}
	for i, s := range steps {
		acts := e.ApplyReport(s.seq, s.index, failed("alice", sec(float64(i))), nil)
		if (len(acts) > 0) != s.fires {
			t.Fatalf("step %d (%d,%d): actions %q", i, s.seq, s.index, summary(acts))
		}
	}
	// seq 0 disables the check.
	e = New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{rule}}})
	var acts []Action
	for i := range 3 {
		acts = e.ApplyReport(0, 0, failed("alice", sec(float64(i))), nil)
	}
	if len(acts) == 0 {
		t.Fatal("seq 0: third failure did not fire")
	}
	// Decisions and reports share one sequence.
	e = New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{rule}}})
	e.ApplyDecision(7, 0, decision("d1", sec(10)), nil)
	for i := range 3 {
		acts = e.ApplyReport(7, 0, failed("alice", sec(float64(11+i))), nil)
	}
	mustNotFire(t, "reports redelivered after a decision of the same (seq, index)", acts)
}
