package signals

import (
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// TestClaimsCountApart (7.1): decisions that name a device id without its
// token count apart from the proven device's: a burst of claims fires the
// anomaly rule on the claim subject, never on the device, and the
// device's own decisions do not add to the claims' count. Velocity rules
// by device do the same with reports.
func TestClaimsCountApart(t *testing.T) {
	t.Parallel()
	e := anomalyEngine()
	var got []Action
	for i := range 60 {
		ts := at(time.Hour + time.Duration(i)*100*time.Millisecond)
		claim := decision("phone", ts)
		claim.DeviceVerified = false
		got = append(got, e.ApplyDecision(0, 0, claim, nil)...)
		if i%10 == 0 {
			if acts := e.ApplyDecision(0, 0, decision("phone", ts), nil); len(acts) != 0 {
				t.Fatalf("the proven device's decision %d fired: %+v", i, acts)
			}
		}
	}
	var mults []Action
	for _, a := range got {
		if a.Kind == SetMultiplier {
			mults = append(mults, a)
		}
	}
	if len(mults) != 1 || mults[0].Subject != ClaimSubject || mults[0].ID != "phone" {
		t.Fatalf("claims set %+v, want one anomaly multiplier on claim/phone", mults)
	}

	rule := policy.VelocityRule{Name: "device-failures", Event: streams.ReportLoginFailed, By: policy.PartDevice,
		Threshold: 3, Window: time.Minute, Action: "tighten", Multiplier: 0.5, Duration: time.Minute}
	v := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{rule}}})
	var fired []Action
	for i := range 3 {
		r := &streams.Report{Type: streams.ReportLoginFailed, TS: sec(float64(i)), DeviceID: "phone", Attested: i == 2}
		fired = append(fired, v.ApplyReport(0, 0, r, nil)...)
	}
	if len(fired) != 0 {
		t.Fatalf("2 claims and 1 proven failure fired a threshold of 3: %+v", fired)
	}
	r := &streams.Report{Type: streams.ReportLoginFailed, TS: sec(3), DeviceID: "phone"}
	for _, a := range v.ApplyReport(0, 0, r, nil) {
		if a.Kind == SetMultiplier && (a.Subject != ClaimSubject || a.ID != "phone") {
			t.Fatalf("the third claim's measure is on %s/%s, want claim/phone", a.Subject, a.ID)
		}
		fired = append(fired, a)
	}
	if len(fired) == 0 {
		t.Fatalf("three claims did not fire")
	}
}
