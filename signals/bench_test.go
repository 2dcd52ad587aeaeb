package signals

import (
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// benchDecisions returns n devices' decisions: one in ten is a denial,
// alternately by the device limit (one key per device, under per_minute)
// and by login-ip (256 ips: these keys are repeat offenders throughout).
func benchDecisions(n int) []streams.Decision {
	ds := make([]streams.Decision, n)
	for i := range ds {
		ds[i] = streams.Decision{Endpoint: "POST /auth/login", Class: "auth", Limit: "device", Allowed: true,
			Result: "allowed", IP: "198.51.100." + itoa(int64(i%256)), DeviceID: "device-" + itoa(int64(i)),
			Account: "acct-" + itoa(int64(i))}
		if i%10 == 0 {
			ds[i].Allowed, ds[i].Result = false, "limited"
			if i%20 == 0 {
				ds[i].Limit = "login-ip"
			}
		}
	}
	return ds
}

// benchOptions: the example anomaly section with min_baseline 1/s, so that
// devices at a steady 10/s never fire and every decision takes the full
// path; repeat offenders at the default 100/min.
func benchOptions(maxKeys int) Options {
	an := exampleAnomaly()
	an.MinBaseline = 1
	return Options{Risk: policy.Risk{Anomaly: an, RepeatOffender: &policy.RepeatOffender{PerMinute: 100}},
		Limits: exampleLimits(), MaxKeys: maxKeys}
}

// BenchmarkApplyDecision feeds 100,000 decisions/s of event time spread
// over 10,000 devices (10/s each), with anomaly detection and repeat
// offenders on, after one warm-up pass over every device.
func BenchmarkApplyDecision(b *testing.B) {
	const devices = 10_000
	const step = 10 * time.Microsecond // 100,000 decisions/s
	e := New(benchOptions(0))
	ds := benchDecisions(devices)
	var seq uint64
	out := make([]Action, 0, 16)
	apply := func(i int) {
		seq++
		d := &ds[i%devices]
		d.TS = t0.Add(time.Duration(seq) * step)
		out = e.ApplyDecision(seq, 0, d, out[:0])
	}
	for i := range 2 * devices {
		apply(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		apply(i)
	}
	b.StopTimer()
	if s := e.Stats(); s.Anomaly != devices {
		b.Fatalf("stats %+v", s)
	}
}

// BenchmarkApplyDecisionKeyRotation gives every decision a device not
// tracked (a key-rotation attack) with MaxKeys 10,000: each one evicts the
// least recently seen device and reuses its rings.
func BenchmarkApplyDecisionKeyRotation(b *testing.B) {
	const keys = 1 << 16
	e := New(benchOptions(10_000))
	ds := benchDecisions(keys)
	out := make([]Action, 0, 16)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		d := &ds[i%keys] // 65,536 devices in turn: each was evicted since its last turn
		d.TS = t0.Add(time.Duration(i) * 10 * time.Microsecond)
		out = e.ApplyDecision(uint64(i+1), 0, d, out[:0])
	}
	b.StopTimer()
	if s := e.Stats(); s.Anomaly > 10_000 || s.Offenders > 10_000 {
		b.Fatalf("stats %+v", s)
	}
}

// BenchmarkApplyReport feeds login_failed reports over 10,000 accounts to
// the example velocity rules (nothing fires: each account fails every 70 s,
// each ip every 35 s).
func BenchmarkApplyReport(b *testing.B) {
	const accounts = 10_000
	spray := policy.VelocityRule{Name: "ip-spray", Event: streams.ReportLoginFailed, By: policy.PartIP,
		Threshold: 50, Window: 10 * time.Minute, Action: "tighten", Multiplier: 0.1, Duration: 30 * time.Minute}
	e := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{lockoutRule(), spray}}})
	rs := make([]streams.Report, accounts)
	for i := range rs {
		rs[i] = streams.Report{Type: streams.ReportLoginFailed, Account: "acct-" + itoa(int64(i)),
			IP: "ip-" + itoa(int64(i%5000))}
	}
	var seq uint64
	out := make([]Action, 0, 16)
	apply := func(i int) {
		seq++
		r := &rs[i%accounts]
		r.TS = t0.Add(time.Duration(seq) * 7 * time.Millisecond)
		out = e.ApplyReport(seq, 0, r, out[:0])
	}
	for i := range accounts {
		apply(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		apply(i)
		if len(out) > 0 {
			b.Fatalf("report %d fired: %s", i, summary(out))
		}
	}
}

// offenderBenchEngine returns an engine at per_minute 1 holding keys
// repeat offenders of the device limit, as under a key-rotation attack:
// each device denied 2 to 9 times in the last minute (many ties), and the
// time at which to list them.
func offenderBenchEngine(b *testing.B, keys int) (*Engine, time.Time) {
	e := New(Options{Risk: policy.Risk{RepeatOffender: &policy.RepeatOffender{PerMinute: 1}},
		Limits: exampleLimits(), MaxKeys: 200_000})
	d := streams.Decision{Endpoint: "GET /feed", Class: "read", Limit: "device", Result: "limited", IP: "203.0.113.9"}
	var seq uint64
	for i := range keys {
		d.DeviceID = "rot-" + itoa(int64(i))
		for range 2 + i*7919%8 {
			seq++
			d.TS = t0.Add(time.Duration(seq) * 20 * time.Microsecond) // 2 M denials within the minute
			e.ApplyDecision(seq, 0, &d, nil)
		}
	}
	if s := e.Stats(); s.Episodes != keys {
		b.Fatalf("stats %+v, want %d episodes", s, keys)
	}
	return e, d.TS
}

// benchListed is risk.MaxOffendersListed, the k riskd asks TopOffenders for.
const benchListed = 1000

// BenchmarkOffenders measures riskd's once-a-second offender computation
// (the list it shares and serves, and the per-limit gauge) with 1,000 and
// 200,000 repeat offenders. It holds the engine's lock throughout, so
// event consumption waits for it.
func BenchmarkOffenders(b *testing.B) {
	for _, keys := range []int{1_000, 200_000} {
		b.Run("keys="+itoa(int64(keys)), func(b *testing.B) {
			e, now := offenderBenchEngine(b, keys)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				list, perLimit := e.TopOffenders(now, benchListed)
				if len(list) != min(keys, benchListed) || perLimit["device"] != keys {
					b.Fatalf("%d offenders listed, %v counted, want %d of %d", len(list), perLimit, min(keys, benchListed), keys)
				}
			}
		})
	}
}
