package service

import (
	"strings"
	"testing"
	"time"
)

const abuseMetricsPolicy = `version: 1
routes:
  - {match: "POST /sms", class: sms}
  - {match: "* *", class: read}
limits:
  - {name: wide, by: [ip], rate: 100000/min}
  - {name: sms-month, by: [ip], quota: 2/month, if: {class: sms}}
  - {name: exports, by: [user], concurrency: 1, if: {class: read}}
risk:
  velocity:
    - {name: otp-pumping, event: otp_sent, by: "attr:phone_prefix", threshold: 3, window: 10m, action: tighten, multiplier: 0.05, duration: 1h}
`

// TestAbuseMetrics: the limit kinds and the reported event types of 7.4
// are measured with bounded labels: decisions by kind, reports by type
// (a type no velocity rule counts is "other", however many are invented),
// on the limiter and in riskd, and velocity measures by action and rule;
// no attribute value appears in a label.
func TestAbuseMetrics(t *testing.T) {
	t.Parallel()
	_, base := start(t, Config{ConfigPath: writePolicy(t, abuseMetricsPolicy), NoForwardAuth: true})
	for i := 0; i < 3; i++ {
		post(t, base+"/v1/check", `{"endpoint":"POST /sms","ip":"198.51.100.7"}`)
	}
	for i, want := range []int{200, 429} {
		if resp, body := post(t, base+"/v1/check", `{"endpoint":"GET /export","ip":"198.51.100.7","user_id":"u1"}`); resp.StatusCode != want {
			t.Errorf("export check %d: %d %s; want %d (concurrency 1, the first lease held)", i+1, resp.StatusCode, body, want)
		}
	}
	reports := []string{
		`{"type":"otp_sent","ip":"198.51.100.7","attributes":{"phone_prefix":"4479"}}`,
		`{"type":"otp_sent","ip":"198.51.100.8","attributes":{"phone_prefix":"4479"}}`,
		`{"type":"otp_sent","ip":"198.51.100.9","attributes":{"phone_prefix":"4479"}}`,
		`{"type":"signup","ip":"198.51.100.7"}`,
		`{"type":"made_up_1","ip":"198.51.100.7"}`,
		`{"type":"login_failed","account":"alice"}`,
	}
	for _, r := range reports {
		if resp, body := post(t, base+"/v1/report", r); resp.StatusCode != 202 {
			t.Fatalf("report %s: %d %s", r, resp.StatusCode, body)
		}
	}
	want := []string{
		`tollgate_decisions_by_kind_total{kind="quota",result="allowed"} 2`,
		`tollgate_decisions_by_kind_total{kind="quota",result="limited"} 1`,
		`tollgate_decisions_by_kind_total{kind="concurrency",result="allowed"} 1`,
		`tollgate_decisions_by_kind_total{kind="concurrency",result="limited"} 1`,
		`tollgate_leases_acquired_total{limit="exports"} 1`,
		`tollgate_reports_total{source="api",type="otp_sent"} 3`,
		`tollgate_reports_total{source="api",type="other"} 2`,
		`tollgate_reports_total{source="api",type="login_failed"} 1`,
		`tollgate_riskd_reports_total{type="otp_sent"} 3`,
		`tollgate_riskd_reports_total{type="other"} 2`,
		`tollgate_riskd_reports_total{type="login_failed"} 1`,
		`tollgate_riskd_velocity_actions_total{action="tighten",rule="otp-pumping"} 1`,
	}
	var m string
	// riskd counts its side once the events reach it through JetStream:
	// seconds on a loaded machine, so the bound is generous
	eventually(t, 15*time.Second, func() string {
		_, m = get(t, base+"/metrics")
		for _, w := range want {
			if !strings.Contains(m, w) {
				name, _, _ := strings.Cut(w, "{")
				return "missing " + w + "; have:\n" + grepLines(m, name)
			}
		}
		return ""
	})
	for _, value := range []string{"4479", "signup", "made_up_1", "u1", "198.51.100"} {
		for _, line := range strings.Split(m, "\n") {
			if strings.HasPrefix(line, "tollgate_") && strings.Contains(line, value) {
				t.Errorf("a label holds %q: %s", value, line)
			}
		}
	}
}
