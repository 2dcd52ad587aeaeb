package signals

import (
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// TestShadowVelocity: a shadow rule fires exactly when its enforced twin
// would (same window, same quiet period after firing), but its only action
// is an alert marked shadow, and it leaves no measure to re-assert.
func TestShadowVelocity(t *testing.T) {
	t.Parallel()
	for _, action := range []string{"lockout", "step_up", "tighten"} {
		t.Run(action, func(t *testing.T) {
			t.Parallel()
			rule := lockoutRule()
			rule.Action = action
			if action == "tighten" {
				rule.Multiplier = 0.1
			}
			shadow := rule
			shadow.Shadow = true
			live := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{rule}}})
			dry := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{shadow}}})
			var rs []*streams.Report
			for i := range 40 {
				rs = append(rs, failed("alice", at(time.Duration(i)*time.Minute/4)))
			}
			perLive, perDry := applyReports(live, rs), applyReports(dry, rs)
			if got, want := firedAt(perDry), firedAt(perLive); !equalInts(got, want) || len(want) == 0 {
				t.Fatalf("shadow fired at %v, enforced at %v", got, want)
			}
			for _, i := range firedAt(perDry) {
				acts := perDry[i]
				if len(acts) != 1 || acts[0].Kind != Alert || !acts[0].Alert.Shadow {
					t.Fatalf("event %d: shadow actions %s (shadow=%v), want one shadow alert", i, summary(acts), acts[0].Alert.Shadow)
				}
				la := alerts(perLive[i])[0]
				if la.Shadow || acts[0].Alert.Reason != la.Reason+"; shadow rule: not enforced" {
					t.Errorf("reason %q, enforced %q", acts[0].Alert.Reason, la.Reason)
				}
			}
			if got := dry.Active(at(time.Hour)); len(got) != 0 {
				t.Errorf("shadow measures to re-assert: %s", summary(got))
			}
		})
	}
}

// TestShadowAnomaly: a shadow anomaly rule alerts (shadow) and sets no multiplier.
func TestShadowAnomaly(t *testing.T) {
	t.Parallel()
	a := exampleAnomaly()
	a.Shadow = true
	e := New(Options{Risk: policy.Risk{Anomaly: a}})
	for i := range 600 {
		mustNotFire(t, "steady", e.ApplyDecision(0, 0, decision("d1", sec(float64(i))), nil))
	}
	var got []Action
	for k := range 2000 {
		got = append(got, e.ApplyDecision(0, 0, decision("d1", at(600*time.Second+time.Duration(k)*10*time.Millisecond)), nil)...)
	}
	if len(got) != 1 || got[0].Kind != Alert || !got[0].Alert.Shadow || got[0].Alert.Kind != streams.AlertAnomaly {
		t.Fatalf("actions %s, want one shadow anomaly alert", summary(got))
	}
	if acts := e.Active(at(700 * time.Second)); len(acts) != 0 {
		t.Errorf("measures %s", summary(acts))
	}
}
