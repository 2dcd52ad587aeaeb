package signals

import (
	"reflect"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

func offenderEngine(perMinute int) *Engine {
	return New(Options{Risk: policy.Risk{RepeatOffender: &policy.RepeatOffender{PerMinute: perMinute}}, Limits: exampleLimits()})
}

func TestRepeatOffenderAlert(t *testing.T) {
	t.Parallel()
	e := offenderEngine(5)
	var fired []int
	var acts []Action
	for i := range 20 {
		if got := e.ApplyDecision(0, 0, denial("login-ip", "192.0.2.1", sec(float64(i))), nil); len(got) > 0 {
			fired = append(fired, i)
			acts = got
		}
	}
	if !equalInts(fired, []int{5}) {
		t.Fatalf("alerted on denials %v, want [5] (the 6th, once)", fired)
	}
	ts := sec(5)
	want := []Action{{Kind: Alert, Subject: "ip", ID: "192.0.2.1", Alert: streams.Alert{
		V:          streams.SchemaVersion,
		ID:         "repeat_offender:login-ip:ip:192.0.2.1|POST /auth/login:1713520805000",
		TS:         ts,
		Kind:       "repeat_offender",
		Subject:    "ip",
		SubjectID:  "192.0.2.1",
		Rule:       "login-ip",
		Multiplier: 1,
		Rate:       6.0 / 60,
		Baseline:   5.0 / 60,
		ExpiresAt:  ts.Add(time.Minute),
		Reason:     `limit login-ip denied key "192.0.2.1|POST /auth/login" 6 times in the last minute (more than 5)`,
		Count:      6,
	}}}
	if !reflect.DeepEqual(acts, want) {
		t.Fatalf("actions:\n got %+v\nwant %+v", acts, want)
	}
}

func TestRepeatOffenderSubjects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		limit, subject, id string
	}{
		{"global", "ip", "192.0.2.1"},
		{"device", "device", "d-192.0.2.1"},
		{"login-account", "account", "acct-192.0.2.1"},
	}
	for _, tc := range tests {
		e := offenderEngine(1)
		var acts []Action
		for i := range 2 {
			acts = e.ApplyDecision(0, 0, denial(tc.limit, "192.0.2.1", sec(float64(i))), acts)
		}
		if len(acts) != 1 || acts[0].Subject != tc.subject || acts[0].ID != tc.id ||
			acts[0].Alert.Subject != tc.subject || acts[0].Alert.SubjectID != tc.id {
			t.Errorf("%s: %+v", tc.limit, acts)
		}
	}
}

func TestRepeatOffenderIgnored(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*streams.Decision)
	}{
		{"allowed", func(d *streams.Decision) { d.Allowed, d.Result = true, "allowed" }},
		{"shadow limited", func(d *streams.Decision) { d.Allowed, d.Result = true, "shadow_limited" }},
		{"locked", func(d *streams.Decision) { d.Result = "locked"; d.Limit = "account-failures" }},
		{"unavailable", func(d *streams.Decision) { d.Result = "unavailable" }},
		{"unknown limit", func(d *streams.Decision) { d.Limit = "nope" }},
		{"no limit", func(d *streams.Decision) { d.Limit = "" }},
		{"key part missing", func(d *streams.Decision) { d.Limit = "login-account"; d.Account = "" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := offenderEngine(1)
			for i := range 10 {
				d := denial("login-ip", "192.0.2.1", sec(float64(i)))
				tc.edit(d)
				mustNotFire(t, "decision", e.ApplyDecision(0, 0, d, nil))
			}
			if s := e.Stats(); s.Offenders != 0 || len(e.Offenders(sec(10))) != 0 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
	// Off without a repeat_offender section.
	e := New(Options{Limits: exampleLimits()})
	for i := range 10 {
		mustNotFire(t, "off", e.ApplyDecision(0, 0, denial("login-ip", "192.0.2.1", sec(float64(i))), nil))
	}
	if e.Offenders(sec(10)) != nil {
		t.Fatal("offenders listed while off")
	}
}

func TestOffendersList(t *testing.T) {
	t.Parallel()
	e := offenderEngine(5)
	deny := func(limit, ip string, n int, from float64) {
		for i := range n {
			e.ApplyDecision(0, 0, denial(limit, ip, sec(from+float64(i)/10)), nil)
		}
	}
	deny("login-ip", "192.0.2.1", 8, 0)
	deny("login-ip", "192.0.2.2", 7, 1)
	deny("login-account", "192.0.2.3", 7, 2)
	deny("device", "192.0.2.4", 7, 3)
	deny("device", "192.0.2.5", 5, 4) // not more than 5: not an offender
	got := e.Offenders(sec(10))
	want := []Offender{
		{Limit: "login-ip", Key: "192.0.2.1|POST /auth/login", Count: 8, Since: sec(0.5)},
		{Limit: "device", Key: "d-192.0.2.4", Count: 7, Since: sec(3.5)},
		{Limit: "login-account", Key: "acct-192.0.2.3|POST /auth/login", Count: 7, Since: sec(2.5)},
		{Limit: "login-ip", Key: "192.0.2.2|POST /auth/login", Count: 7, Since: sec(1.5)},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("offenders:\n got %+v\nwant %+v", got, want)
	}
	// The window slides: (now-60s, now] in 1 s slots. At 60.5s the denials
	// of second 0 have left; at 64s all have.
	if got := e.Offenders(sec(60.5)); len(got) != 3 || got[0].Count != 7 {
		t.Fatalf("at 60.5s: %+v", got)
	}
	if got := e.Offenders(sec(64)); len(got) != 0 {
		t.Fatalf("at 64s: %+v", got)
	}
}

func TestRepeatOffenderEpisodes(t *testing.T) {
	t.Parallel()
	const ip = "192.0.2.1"
	type burst struct {
		n     int
		at    float64 // seconds; denials 10 ms apart
		alert bool
	}
	tests := []struct {
		name   string
		bursts []burst
	}{
		{"back within the minute: same episode", []burst{{8, 0, true}, {8, 100, false}}},
		{"back after a full minute out: new episode", []burst{{8, 0, true}, {8, 121, true}}},
		{"out for 59s only", []burst{{8, 0, true}, {8, 119, false}, {8, 250, true}}},
		// Out at 60s already, seen by a denial then: back at 120s is a new episode.
		{"exit seen by a denial", []burst{{10, 0, true}, {1, 1, false}, {1, 60, false}, {6, 120, true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := offenderEngine(5)
			for _, b := range tc.bursts {
				var acts []Action
				for i := range b.n {
					acts = e.ApplyDecision(0, 0, denial("login-ip", ip, sec(b.at+float64(i)/100)), acts)
				}
				if (len(acts) == 1) != b.alert || len(acts) > 1 {
					t.Fatalf("burst at %vs: %s, want alert %v", b.at, summary(acts), b.alert)
				}
			}
		})
	}
}

// TestRepeatOffenderKeysApart: the parts of a key are kept apart even
// when an id holds "|": user "a|b" on device "c" and user "a" on device
// "b|c" are two keys (their denials never add up), both shown as "a|b|c".
func TestRepeatOffenderKeysApart(t *testing.T) {
	t.Parallel()
	lim := policy.Limit{Name: "user-device", By: []policy.KeyPart{policy.PartUser, policy.PartDevice}, Burst: 1, Rate: 1, Period: time.Minute}
	e := New(Options{Risk: policy.Risk{RepeatOffender: &policy.RepeatOffender{PerMinute: 2}}, Limits: []policy.Limit{lim}})
	var fired []Action
	for i := range 4 {
		user, device := "a|b", "c"
		if i%2 == 1 {
			user, device = "a", "b|c"
		}
		fired = e.ApplyDecision(0, 0, &streams.Decision{TS: sec(float64(i)), Endpoint: "POST /x", Class: "write", Limit: lim.Name,
			Result: "limited", IP: "192.0.2.1", UserID: user, DeviceID: device}, fired)
	}
	if len(fired) != 0 {
		t.Fatalf("two keys of two denials each alerted as one of four: %+v", fired)
	}
	fired = e.ApplyDecision(0, 0, &streams.Decision{TS: sec(4), Endpoint: "POST /x", Class: "write", Limit: lim.Name,
		Result: "limited", IP: "192.0.2.1", UserID: "a|b", DeviceID: "c"}, nil)
	if len(fired) != 1 || fired[0].Alert.Reason != `limit user-device denied key "a|b|c" 3 times in the last minute (more than 2)` {
		t.Fatalf("the third denial of one key: %+v", fired)
	}
	if list := e.Offenders(sec(5)); len(list) != 1 || list[0].Key != "a|b|c" || list[0].Count != 3 {
		t.Fatalf("offenders %+v", list)
	}
}
