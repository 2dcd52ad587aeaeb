package policy

import "testing"

// TestEventLabel: a reported type is its own metric label when built in or
// counted by a velocity rule, and "other" otherwise, so clients cannot
// mint series with made-up types (7.4).
func TestEventLabel(t *testing.T) {
	p, err := Parse("p.yaml", []byte(`version: 1
limits:
  - {name: ip, by: [ip], rate: 10/s}
risk:
  velocity:
    - {name: otp-pumping, event: otp_sent, by: "attr:phone_prefix", threshold: 50, window: 10m, action: tighten, multiplier: 0.05, duration: 1h}
`))
	if err != nil {
		t.Fatal(err)
	}
	for typ, want := range map[string]string{
		"login_failed": "login_failed", "login_succeeded": "login_succeeded", "step_up_passed": "step_up_passed",
		"otp_sent": "otp_sent", "signup": EventOther, "zz_made_up_1": EventOther,
	} {
		if got := p.EventLabel(typ); got != want {
			t.Errorf("EventLabel(%q) = %q, want %q", typ, got, want)
		}
	}
	var none *Policy
	if got := none.EventLabel("otp_sent"); got != EventOther {
		t.Errorf("nil policy: EventLabel(otp_sent) = %q", got)
	}
}
