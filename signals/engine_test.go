package signals

import (
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// fullOptions enables every signal.
func fullOptions(maxKeys int) Options {
	lock := lockoutRule()
	lock.Threshold = 5
	lock.Escalate = &policy.Escalate{Factor: 2, Max: time.Hour}
	stepUp := policy.VelocityRule{Name: "device-step-up", Event: streams.ReportLoginFailed, By: policy.PartDevice,
		Threshold: 4, Window: time.Minute, Action: "step_up", Duration: 5 * time.Minute}
	spray := policy.VelocityRule{Name: "ip-spray", Event: streams.ReportLoginFailed, By: policy.PartIP,
		Threshold: 8, Window: 10 * time.Minute, Action: "tighten", Multiplier: 0.1, Duration: 30 * time.Minute}
	an := exampleAnomaly()
	an.Factor, an.LongWindow, an.MinBaseline = 10, 2*time.Minute, 0.5
	return Options{
		Risk: policy.Risk{
			Velocity:       []policy.VelocityRule{lock, stepUp, spray},
			Anomaly:        an,
			RepeatOffender: &policy.RepeatOffender{PerMinute: 10},
		},
		Limits:  exampleLimits(),
		MaxKeys: maxKeys,
	}
}

// event is a decision or a report with its (seq, index).
type event struct {
	seq   uint64
	index int
	d     *streams.Decision
	r     *streams.Report
}

// randomEvents returns a reproducible mix of decisions and reports, with
// jittered (out-of-order) timestamps, bursts and redeliveries.
func randomEvents(n int) []event {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(prefix string, k int) string { return prefix + itoa(int64(rng.IntN(k))) }
	limits := exampleLimits()
	var evs []event
	var seq uint64 = 1
	clock := t0
	for len(evs) < n {
		clock = clock.Add(time.Duration(rng.IntN(10)) * time.Millisecond)
		ts := clock.Add(time.Duration(rng.IntN(100)-50) * time.Millisecond)
		ev := event{seq: seq}
		switch x := rng.IntN(100); {
		case x < 10:
			typ := streams.ReportLoginFailed
			if rng.IntN(6) == 0 {
				typ = streams.ReportStepUpPassed
			}
			ev.r = &streams.Report{Type: typ, TS: ts, Account: pick("acct", 12), IP: pick("ip", 10), DeviceID: pick("dev", 20)}
		default:
			d := &streams.Decision{TS: ts, Endpoint: "POST /auth/login", Limit: limits[rng.IntN(len(limits))].Name,
				Allowed: true, Result: "allowed", IP: pick("ip", 10), DeviceID: pick("dev", 20), Account: pick("acct", 12)}
			if rng.IntN(3) == 0 {
				d.Allowed, d.Result = false, "limited"
			}
			ev.d = d
		}
		if rng.IntN(4) == 0 { // a batch: same seq, next index
			ev.index = 1
			if len(evs) > 0 {
				ev.seq = evs[len(evs)-1].seq
				ev.index = evs[len(evs)-1].index + 1
			}
		} else {
			seq++
			ev.seq = seq
		}
		evs = append(evs, ev)
		if rng.IntN(50) == 0 { // a redelivery
			evs = append(evs, evs[len(evs)-1-rng.IntN(min(len(evs), 5))])
		}
		if rng.IntN(2000) == 0 { // a device burst
			dev := pick("dev", 20)
			for i := range 300 {
				seq++
				evs = append(evs, event{seq: seq, d: &streams.Decision{TS: ts.Add(time.Duration(i) * time.Millisecond),
					Result: "allowed", Allowed: true, DeviceID: dev, IP: "burst"}})
			}
		}
	}
	return evs
}

// run feeds evs to e and returns all actions; with readers set, it also
// calls the read-only methods in between, with wall-clock times.
func run(e *Engine, evs []event, readers bool) []Action {
	var out []Action
	for i, ev := range evs {
		if ev.d != nil {
			out = e.ApplyDecision(ev.seq, ev.index, ev.d, out)
		} else {
			out = e.ApplyReport(ev.seq, ev.index, ev.r, out)
		}
		if readers && i%97 == 0 {
			e.Offenders(time.Now())
			e.Active(time.Now())
			ts := time.Time{}
			if ev.d != nil {
				ts = ev.d.TS
			} else {
				ts = ev.r.TS
			}
			e.Offenders(ts)
			e.Active(ts)
			e.Stats()
		}
	}
	return out
}

func TestDeterministicReplay(t *testing.T) {
	t.Parallel()
	evs := randomEvents(50_000)
	for _, maxKeys := range []int{0, 8} {
		first := run(New(fullOptions(maxKeys)), evs, false)
		second := run(New(fullOptions(maxKeys)), evs, true)
		if !reflect.DeepEqual(first, second) {
			t.Fatalf("MaxKeys %d: replay differs (%d vs %d actions)", maxKeys, len(first), len(second))
		}
		if third := run(NewSingleGoroutine(fullOptions(maxKeys)), evs, true); !reflect.DeepEqual(first, third) {
			t.Fatalf("MaxKeys %d: unshared replay differs (%d vs %d actions)", maxKeys, len(first), len(third))
		}
		if len(first) == 0 {
			t.Fatalf("MaxKeys %d: no actions", maxKeys)
		}
		kinds := map[string]int{}
		for _, a := range first {
			switch a.Kind {
			case Alert:
				kinds[a.Alert.Kind]++
			case ClearLock:
				kinds["clear"]++
			}
		}
		for _, k := range []string{"lockout", "step_up", "tighten", "anomaly", "repeat_offender"} {
			if kinds[k] == 0 && maxKeys == 0 {
				t.Errorf("MaxKeys %d: no %s alert in the replay (%v): the test exercises too little", maxKeys, k, kinds)
			}
		}
	}
}

func TestMemoryBound(t *testing.T) {
	t.Parallel()
	const maxKeys, keys = 1000, 100_000
	e := New(fullOptions(maxKeys))
	for i := range keys {
		id := "rot-" + itoa(int64(i))
		ts := at(time.Duration(i) * time.Millisecond)
		d := &streams.Decision{TS: ts, Endpoint: "GET /x", Limit: "device", Result: "limited", IP: id, DeviceID: id}
		e.ApplyDecision(0, 0, d, nil)
		r := &streams.Report{Type: streams.ReportLoginFailed, TS: ts, Account: id, IP: id, DeviceID: id}
		e.ApplyReport(0, 0, r, nil)
		if i%10_000 == 0 {
			checkBound(t, e.Stats(), maxKeys)
		}
	}
	s := e.Stats()
	checkBound(t, s, maxKeys)
	if s.Velocity == 0 || s.Anomaly == 0 || s.Offenders == 0 {
		t.Fatalf("stats %+v: nothing tracked", s)
	}
	// Still working after the rotation: a new device's burst fires.
	var fired bool
	for i := range 100 {
		acts := e.ApplyDecision(0, 0, decision("fresh", at(keys*time.Millisecond+time.Duration(i)*time.Millisecond)), nil)
		fired = fired || len(acts) > 0
	}
	if !fired {
		t.Fatal("a burst after the key rotation did not fire")
	}
}

func checkBound(t *testing.T, s Stats, max int) {
	t.Helper()
	if s.Velocity > max || s.Anomaly > max || s.Offenders > max || s.Episodes > max || s.Measures > max {
		t.Fatalf("stats %+v exceed %d", s, max)
	}
}

func TestSweepIdleKeys(t *testing.T) {
	t.Parallel()
	e := New(fullOptions(0))
	for i := range 100 {
		id := "k" + itoa(int64(i))
		e.ApplyDecision(0, 0, &streams.Decision{TS: at(0), Limit: "device", Result: "limited", DeviceID: id, IP: id}, nil)
		e.ApplyReport(0, 0, &streams.Report{Type: streams.ReportLoginFailed, TS: at(0), Account: id}, nil)
	}
	// A day later, one key's traffic sweeps the others away, one per event.
	for i := range 300 {
		ts := at(24*time.Hour + time.Duration(i)*time.Second)
		e.ApplyDecision(0, 0, &streams.Decision{TS: ts, Result: "allowed", DeviceID: "live"}, nil)
		e.ApplyReport(0, 0, &streams.Report{Type: streams.ReportLoginFailed, TS: ts, Account: "zz", UserID: "x"}, nil)
	}
	s := e.Stats()
	if s.Anomaly != 1 || s.Offenders != 0 || s.Velocity > 1 || s.Episodes != 0 {
		t.Fatalf("stats %+v: idle keys not swept", s)
	}
}

func TestActive(t *testing.T) {
	t.Parallel()
	e := New(fullOptions(0))
	for i := range 5 { // lockout alice (5 failures), 15m
		e.ApplyReport(0, 0, &streams.Report{Type: streams.ReportLoginFailed, TS: sec(float64(i)), Account: "alice"}, nil)
	}
	for i := range 8 { // tighten ip 192.0.2.9 (8 failures), 30m
		e.ApplyReport(0, 0, &streams.Report{Type: streams.ReportLoginFailed, TS: sec(float64(10 + i)), IP: "192.0.2.9"}, nil)
	}
	for i := range 4 { // step-up on device d9, 5m
		e.ApplyReport(0, 0, &streams.Report{Type: streams.ReportLoginFailed, TS: sec(float64(20 + i)), DeviceID: "d9", Attested: true}, nil)
	}
	var an []Action
	for i := range 50 { // anomaly on device d1, 15m
		an = e.ApplyDecision(0, 0, decision("d1", sec(30+float64(i)/100)), an)
	}
	got := e.Active(sec(40))
	want := []string{
		"SetLock account/alice lockout",
		"SetMultiplier device/d1 anomaly=0.05",
		"SetLock device/d9 step_up",
		"SetMultiplier ip/192.0.2.9 velocity=0.1",
	}
	if s := summary(got); s != joinSummary(want) {
		t.Fatalf("Active at 40s:\n got %s\nwant %s", s, joinSummary(want))
	}
	if !reflect.DeepEqual(got[1], an[0]) {
		t.Fatalf("Active differs from the action that set it:\n got %+v\nwant %+v", got[1], an[0])
	}
	if !got[0].Lock.Until.Equal(sec(4).Add(15 * time.Minute)) {
		t.Fatalf("lock until %v", got[0].Lock.Until)
	}
	// d9's step-up (until 23s+5m) is over at 6m; alice's lockout at 15m4s.
	if s := summary(e.Active(sec(360))); s != joinSummary([]string{want[0], want[1], want[3]}) {
		t.Fatalf("Active at 6m: %s", s)
	}
	if s := summary(e.Active(at(16 * time.Minute))); s != joinSummary([]string{want[3]}) {
		t.Fatalf("Active at 16m: %s", s)
	}
	if got := e.Active(at(time.Hour)); len(got) != 0 {
		t.Fatalf("Active at 1h: %s", summary(got))
	}
}

func joinSummary(parts []string) string {
	s := ""
	for i, p := range parts {
		if i > 0 {
			s += "; "
		}
		s += p
	}
	return s
}

func TestSetPolicy(t *testing.T) {
	t.Parallel()
	opts := func(rules ...policy.VelocityRule) Options {
		return Options{Risk: policy.Risk{Velocity: rules, Anomaly: exampleAnomaly(),
			RepeatOffender: &policy.RepeatOffender{PerMinute: 5}}, Limits: exampleLimits()}
	}
	fail := func(e *Engine, n int, from float64) []Action {
		var acts []Action
		for i := range n {
			acts = e.ApplyReport(0, 0, failed("alice", sec(from+float64(i))), acts)
		}
		return acts
	}
	rule := lockoutRule()

	// Same rule: counters kept.
	e := New(opts(rule))
	mustNotFire(t, "5 failures", fail(e, 5, 0))
	e.SetPolicy(opts(rule))
	if got := fail(e, 5, 5); len(got) != 2 {
		t.Fatalf("kept counters: 10th failure: %s", summary(got))
	}

	// Renamed rule: counters dropped.
	e = New(opts(rule))
	fail(e, 5, 0)
	renamed := rule
	renamed.Name = "account-failures-v2"
	e.SetPolicy(opts(renamed))
	mustNotFire(t, "renamed rule", fail(e, 5, 5))
	if got := fail(e, 5, 10); len(got) != 2 {
		t.Fatalf("renamed rule, 10th failure: %s", summary(got))
	}

	// Lower threshold: kept counters fire at the new threshold.
	e = New(opts(rule))
	fail(e, 6, 0)
	lower := rule
	lower.Threshold = 7
	e.SetPolicy(opts(lower))
	if got := fail(e, 1, 6); len(got) != 2 {
		t.Fatalf("threshold 7: 7th failure: %s", summary(got))
	}

	// Repeat offenders: counters of an unchanged limit kept; a limit whose
	// key changed is dropped.
	e = New(opts(rule))
	for i := range 5 {
		e.ApplyDecision(0, 0, denial("login-ip", "192.0.2.1", sec(float64(i))), nil)
		e.ApplyDecision(0, 0, denial("device", "192.0.2.1", sec(float64(i))), nil)
	}
	o := opts(rule)
	o.Limits = exampleLimits()
	o.Limits[1].By = []policy.KeyPart{policy.PartDevice, policy.PartIP}
	e.SetPolicy(o)
	if s := e.Stats(); s.Offenders != 1 {
		t.Fatalf("offenders after reload: %+v", s)
	}
	if got := e.ApplyDecision(0, 0, denial("login-ip", "192.0.2.1", sec(5)), nil); len(got) != 1 {
		t.Fatalf("kept offender counter: 6th denial: %s", summary(got))
	}
	// No anomaly section: rings dropped; no repeat_offender: counters dropped.
	o.Risk.Anomaly, o.Risk.RepeatOffender = nil, nil
	e.ApplyDecision(0, 0, decision("d1", sec(6)), nil)
	e.SetPolicy(o)
	if s := e.Stats(); s.Anomaly != 0 || s.Offenders != 0 || s.Episodes != 0 {
		t.Fatalf("stats after removing sections: %+v", s)
	}
	mustNotFire(t, "anomaly off", e.ApplyDecision(0, 0, decision("d1", sec(7)), nil))
	// Shrinking MaxKeys evicts.
	o.MaxKeys = 1
	for _, a := range []string{"a", "b", "c"} {
		e.ApplyReport(0, 0, failed(a, sec(8)), nil)
	}
	e.SetPolicy(o)
	if s := e.Stats(); s.Velocity != 1 {
		t.Fatalf("stats after MaxKeys 1: %+v", s)
	}
}

func TestIgnoredEvents(t *testing.T) {
	t.Parallel()
	e := New(fullOptions(0))
	mustNotFire(t, "nil decision", e.ApplyDecision(1, 0, nil, nil))
	mustNotFire(t, "nil report", e.ApplyReport(1, 0, nil, nil))
	for range 100 {
		mustNotFire(t, "zero ts", e.ApplyDecision(0, 0, decision("d1", time.Time{}), nil))
		mustNotFire(t, "zero ts", e.ApplyReport(0, 0, failed("alice", time.Time{}), nil))
	}
	if s := e.Stats(); s != (Stats{}) {
		t.Fatalf("stats %+v", s)
	}
}

func TestConcurrentReaders(t *testing.T) {
	t.Parallel()
	e := New(fullOptions(64))
	evs := randomEvents(20_000)
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			e.Offenders(t0.Add(time.Minute))
			e.Active(t0.Add(time.Minute))
			e.Stats()
			e.SetPolicy(fullOptions(64))
		}
	}()
	run(e, evs, false)
	close(done)
	wg.Wait()
}

func TestFormat(t *testing.T) {
	t.Parallel()
	durations := map[time.Duration]string{
		15 * time.Minute: "15m", time.Hour: "1h", 90 * time.Minute: "1h30m", 10 * time.Second: "10s",
		90 * time.Second: "1m30s", 24 * time.Hour: "24h", 500 * time.Millisecond: "500ms",
	}
	for d, want := range durations {
		if got := fmtDuration(d); got != want {
			t.Errorf("fmtDuration(%v) = %q, want %q", d, got, want)
		}
	}
	floats := map[float64]string{100: "100", 0.05: "0.05", 1.0 / 60: "0.01667", 12345.6: "12346", 1: "1"}
	for f, want := range floats {
		if got := fmtFloat(f); got != want {
			t.Errorf("fmtFloat(%v) = %q, want %q", f, got, want)
		}
	}
	for n, want := range map[int]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 21: "21st", 102: "102nd"} {
		if got := ordinal(n); got != want {
			t.Errorf("ordinal(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestLaggingHost(t *testing.T) {
	t.Parallel()
	// One limiter host's clock runs an hour ahead of the other's. Keys fed
	// by the lagging host must not be swept as idle (against the newest
	// time seen) while they are in use: each lagging event is followed by
	// one from the fast host, which runs the sweeps.
	e := New(fullOptions(0))
	ahead := func(i int) {
		ts := at(time.Hour + time.Duration(i)*time.Millisecond)
		e.ApplyDecision(0, 0, &streams.Decision{TS: ts, Result: "allowed", Allowed: true, DeviceID: "fast" + itoa(int64(i%50))}, nil)
		e.ApplyReport(0, 0, &streams.Report{Type: streams.ReportLoginSucceeded, TS: ts, Account: "x"}, nil)
	}
	var kinds []string
	collect := func(acts []Action) {
		for _, a := range alerts(acts) {
			kinds = append(kinds, a.Kind+" "+a.SubjectID)
		}
	}
	n := 0
	for i := range 5 { // lockout after 5 failures
		collect(e.ApplyReport(0, 0, failed("alice", sec(float64(i*10))), nil))
		ahead(n)
		n++
	}
	for i := range 11 { // repeat offender after 11 denials within a minute
		collect(e.ApplyDecision(0, 0, denial("login-ip", "192.0.2.1", sec(60+float64(i)*5)), nil))
		ahead(n)
		n++
	}
	for i := range 120 { // a device at 1/s for 2 min, then a burst of 150 in 1 s (factor 10)
		collect(e.ApplyDecision(0, 0, decision("slow", sec(200+float64(i))), nil))
		ahead(n)
		n++
	}
	for i := range 150 {
		collect(e.ApplyDecision(0, 0, decision("slow", sec(320+float64(i)/150)), nil))
		ahead(n)
		n++
	}
	want := []string{"lockout alice", "repeat_offender 192.0.2.1", "anomaly slow"}
	if len(kinds) != len(want) {
		t.Fatalf("alerts %v, want %v", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("alerts %v, want %v", kinds, want)
		}
	}
}
