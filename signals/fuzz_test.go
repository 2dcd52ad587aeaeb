package signals_test

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/signals"
	"github.com/tollgate-dev/tollgate/streams"
)

// fuzzRules adds to testdata/replay-candidate.yaml's risk rules velocity
// rules on a device, on any event type and by attribute, with escalation.
const fuzzRules = `
    - {name: device-otp, event: otp_sent, by: device, threshold: 3, window: 1m,
       action: block, duration: 10m, escalate: {factor: 2, max: 24h}}
    - {name: user-any, event: payment_declined, by: user, threshold: 2, window: 1h,
       action: tighten, multiplier: 0.5, duration: 1h}
`

// FuzzApply feeds the signals engine arbitrary decisions messages and
// reports (each applied repeat times, step milliseconds apart, so that
// thresholds are crossed), under a policy with every kind of rule: it
// never panics, every lock it sets ends after the event that set it,
// every multiplier it sets lies in [0, 1], and its counts stay within
// MaxKeys.
//
//	go test -run '^$' -fuzz '^FuzzApply$' -fuzztime 30s ./signals/
func FuzzApply(f *testing.F) {
	src, err := os.ReadFile("../testdata/replay-candidate.yaml")
	if err != nil {
		f.Fatal(err)
	}
	yaml, at := string(src), "    - {name: ip-spray,"
	i := strings.Index(yaml, at)
	if i < 0 {
		f.Fatalf("%q not in the policy", at)
	}
	p, err := policy.Parse("fuzz.yaml", []byte(yaml[:i]+fuzzRules[1:]+yaml[i:]))
	if err != nil {
		f.Fatal(err)
	}
	ts := "2026-12-06T10:00:00Z"
	f.Add(false, []byte(`{"type":"login_failed","account":"alice","ip":"198.51.100.7","ts":"`+ts+`"}`), uint8(6), int16(1000))
	f.Add(false, []byte(`{"type":"otp_sent","device_id":"d1","ts":"`+ts+`"}`), uint8(9), int16(-5))
	f.Add(false, []byte(`{"type":"payment_declined","user_id":"u1","ts":"`+ts+`"}`), uint8(3), int16(0))
	f.Add(true, []byte(`{"v":1,"decisions":[{"ts":"`+ts+`","allowed":false,"limit":"device","kind":"bucket","result":"denied","ip":"198.51.100.7","user_id":"u1","device_id":"d1","endpoint":"GET /x","cost":1}]}`), uint8(120), int16(10))
	f.Add(true, []byte(`{"decisions":[{"ts":"`+ts+`","allowed":true,"device_id":"d2","cost":1e300}]}`), uint8(50), int16(-1))
	f.Fuzz(func(t *testing.T, decisions bool, msg []byte, repeat uint8, step int16) {
		const maxKeys = 64
		e := signals.New(signals.Options{Risk: p.Risk, Limits: p.Limits, MaxKeys: maxKeys})
		var b streams.DecisionBatch
		var r streams.Report
		if decisions && streams.DecodeDecisionBatch(msg, &b) != nil || !decisions && json.Unmarshal(msg, &r) != nil {
			return
		}
		var out []signals.Action
		last := time.Time{}
		for i := 0; i < int(repeat%128); i++ {
			shift := time.Duration(i) * time.Duration(step) * time.Millisecond
			n := len(out)
			if decisions {
				for j := range b.Decisions {
					d := b.Decisions[j]
					d.TS = d.TS.Add(shift)
					last = d.TS
					out = e.ApplyDecision(0, 0, &d, out)
				}
			} else {
				rr := r
				rr.TS = r.TS.Add(shift)
				last = rr.TS
				out = e.ApplyReport(0, 0, &rr, out)
			}
			for _, a := range out[n:] {
				checkAction(t, a, last)
			}
		}
		e.Offenders(last)
		e.Active(last)
		st := e.Stats()
		for _, c := range []int{st.Velocity, st.Anomaly, st.Offenders, st.Episodes, st.Measures} {
			if c > maxKeys {
				t.Fatalf("stats %+v over MaxKeys %d", st, maxKeys)
			}
		}
	})
}

// checkAction fails t when a, caused by an event at ts, is malformed.
func checkAction(t *testing.T, a signals.Action, ts time.Time) {
	t.Helper()
	switch a.Kind {
	case signals.SetLock:
		if !a.Lock.Until.After(ts) {
			t.Fatalf("lock %+v ends before the event at %v that set it", a.Lock, ts)
		}
	case signals.SetMultiplier:
		if v := a.Multiplier.Value; v < 0 || v > 1 || math.IsNaN(v) {
			t.Fatalf("multiplier %+v outside [0, 1]", a.Multiplier)
		}
	case signals.Alert:
		if a.Alert.ID == "" || a.Alert.Kind == "" {
			t.Fatalf("alert without id or kind: %+v", a.Alert)
		}
	default:
		t.Fatalf("unknown action kind %d", a.Kind)
	}
}
