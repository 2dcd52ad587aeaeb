package signals

import (
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// TestAllowListedEventsIgnored: decisions answered by an allow list and
// reports of allow-listed identities feed no signal (CONTRACT 6.9) but
// lockouts and step-ups (7.1; TestAllowListedLockout).
func TestAllowListedEventsIgnored(t *testing.T) {
	t.Parallel()
	rule := lockoutRule()
	rule.Threshold = 2
	rule.Action, rule.Multiplier = policy.ActionTighten, 0.5
	e := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{rule}, Anomaly: exampleAnomaly()}})
	for i := range 5 {
		r := failed("alice", sec(float64(i)))
		r.AllowList = "staff"
		mustNotFire(t, "allow-listed report", e.ApplyReport(0, 0, r, nil))
	}
	// A burst of allow-listed decisions builds no baseline and fires nothing.
	for i := range 2000 {
		d := decision("d1", at(time.Duration(i)*time.Millisecond))
		d.Result, d.Limit = "allowed_list", "office"
		mustNotFire(t, "allow-listed decision", e.ApplyDecision(0, 0, d, nil))
	}
	if s := e.Stats(); s.Velocity != 0 || s.Anomaly != 0 {
		t.Fatalf("allow-listed events were counted: %+v", s)
	}
	// The same report without the mark counts.
	var acts []Action
	for i := range 2 {
		acts = e.ApplyReport(0, 0, failed("alice", sec(float64(10+i))), acts)
	}
	if len(acts) == 0 {
		t.Fatal("unmarked reports did not fire the rule")
	}
}

// TestAllowListedLockout: no allow list exempts from a lockout (7.1):
// failed logins of an allow-listed account lock it like any other's.
func TestAllowListedLockout(t *testing.T) {
	t.Parallel()
	rule := lockoutRule()
	rule.Threshold = 3
	e := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{rule}}})
	var acts []Action
	for i := range 3 {
		r := failed("alice", sec(float64(i)))
		r.AllowList = "staff"
		acts = e.ApplyReport(0, 0, r, acts)
	}
	if len(acts) != 2 || acts[0].Kind != SetLock || acts[0].Subject != "account" || acts[0].ID != "alice" ||
		acts[0].Lock.Kind != policy.ActionLockout {
		t.Fatalf("allow-listed failures: actions %+v, want the account's lock and its alert", acts)
	}
}

// TestRepeatOffenderAttributeKey: a limit keyed by an attribute counts
// denials per attribute value; a decision without it is not counted.
func TestRepeatOffenderAttributeKey(t *testing.T) {
	t.Parallel()
	lim := policy.Limit{Name: "tenant", By: []policy.KeyPart{policy.PartAttr}, ByAttr: []string{"tenant"}}
	e := New(Options{Risk: policy.Risk{RepeatOffender: &policy.RepeatOffender{PerMinute: 1}}, Limits: []policy.Limit{lim}})
	var acts []Action
	for i := range 2 {
		d := denial("tenant", "192.0.2.1", sec(float64(i)))
		d.Attributes = map[string]string{"tenant": "acme"}
		acts = e.ApplyDecision(0, 0, d, acts)
		other := denial("tenant", "192.0.2.1", sec(float64(i)))
		mustNotFire(t, "no attribute", e.ApplyDecision(0, 0, other, nil))
	}
	if len(acts) != 1 || acts[0].Alert.Kind != streams.AlertRepeatOffender ||
		acts[0].Alert.Reason != `limit tenant denied key "acme" 2 times in the last minute (more than 1)` {
		t.Fatalf("actions %+v", acts)
	}
}
