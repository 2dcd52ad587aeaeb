package service

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/streams"
)

// attrRulesPolicy blocks a phone prefix and tightens a carrier from the
// same custom event (7.4), with limits keyed by each attribute and one by
// the device that neither touches.
const attrRulesPolicy = `version: 1
routes:
  - {match: "POST /otp/send", class: otp}
  - {match: "* *", class: write}
limits:
  - {name: otp-prefix,  by: [attr:phone_prefix], rate: 100/h, if: {class: otp}}
  - {name: otp-carrier, by: [attr:carrier],      rate: 50/h,  if: {class: otp}}
  - {name: otp-device,  by: [device],            rate: 1000/h, if: {class: otp}}
risk:
  velocity:
    - {name: otp-pumping, event: otp_sent, by: "attr:phone_prefix", threshold: 5, window: 10m, action: block, duration: 1h}
    - {name: otp-carrier, event: otp_sent, by: "attr:carrier", threshold: 3, window: 10m, action: tighten, multiplier: 0.1, duration: 1h}
`

// TestAttrRulesEndToEnd: otp_sent reports through a limiter on real Redis
// and NATS reach riskd, whose block on attr:phone_prefix 4479 and tighten
// on attr:carrier c1 the limiter enforces on the limits naming those
// attributes, for those values only; the alerts are of kind block and
// tighten, and the subject view spells "subject": "attr:phone_prefix",
// "id": "4479".
func TestAttrRulesEndToEnd(t *testing.T) {
	t.Parallel()
	h := newHook(t)
	_, keyPrefix := testenv.Redis(t)
	stream, subj := testenv.SharedStreams(t)
	policyPath := writePolicy(t, attrRulesPolicy+alertingSection("", h.url))
	redisURL := "redis://" + testenv.RedisAddr() + "/0"
	_, base := start(t, Config{ConfigPath: policyPath, RedisURL: redisURL, NATSURL: testenv.NATSURL(),
		KeyPrefix: keyPrefix, SubjectPrefix: subj, StreamName: stream, AdminToken: "tok", Getenv: hookEnv,
		NoForwardAuth: true, L1TTL: 50 * time.Millisecond})
	startAlertRiskd(t, policyPath, redisURL, keyPrefix, subj, stream)
	for i := range 5 {
		body := `{"type":"otp_sent","ip":"198.51.100.` + itoa(i) + `","device_id":"d` + itoa(i) + `","attributes":{"phone_prefix":"4479","carrier":"c1"}}`
		if resp, b := post(t, base+"/v1/report", body); resp.StatusCode != 202 {
			t.Fatalf("report: %d %s", resp.StatusCode, b)
		}
	}
	otp := func(prefix, carrier string) (int, string, string) {
		resp, body := post(t, base+"/v1/check", `{"endpoint":"POST /otp/send","ip":"192.0.2.1","device_id":"x","attributes":{"phone_prefix":"`+prefix+`","carrier":"`+carrier+`"}}`)
		return resp.StatusCode, body, resp.Header.Get("X-RateLimit-Limit")
	}
	eventually(t, 15*time.Second, func() string {
		if code, body, _ := otp("4479", "c2"); code != 429 || !strings.Contains(body, `"limit":"otp-prefix","scope":"attr:phone_prefix"`) {
			return "blocked prefix: " + body
		}
		return ""
	})
	// c1 is tightened to a tenth (50/h -> 5), which binds; c2 and 4420 are untouched
	if code, body, limit := otp("4420", "c1"); code != 200 || limit != "5" || !strings.Contains(body, `"policy":"otp-carrier"`) {
		t.Errorf("tightened carrier: %d limit %s %s", code, limit, body)
	}
	if code, body, limit := otp("4420", "c2"); code != 200 || limit != "50" {
		t.Errorf("other prefix and carrier: %d limit %s %s", code, limit, body)
	}
	code, view := adminDo(t, "GET", base+"/v1/admin/subjects/attr:phone_prefix/4479", "tok", "")
	if code != 200 || !strings.Contains(view, `"subject":"attr:phone_prefix","id":"4479","effective":0,`) || !strings.Contains(view, `"value":0`) {
		t.Errorf("subject view: %d %s", code, view)
	}
	eventually(t, 15*time.Second, func() string {
		h.mu.Lock()
		defer h.mu.Unlock()
		got := map[string]string{}
		for _, b := range h.got {
			got[b.Kind] = b.Subject + " " + b.SubjectID + " " + b.Rule
		}
		if got[streams.AlertBlock] != "attr:phone_prefix 4479 otp-pumping" || got[streams.AlertTighten] != "attr:carrier c1 otp-carrier" {
			return "webhook got " + toJSON(got)
		}
		return ""
	})
}
