package replay

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

const loosePolicy = `version: 1
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "* *", class: write}
limits:
  - {name: login-account, by: [account, route], rate: 100/h, if: {class: auth}}
  - {name: user-write, by: [user], rate: 100/h, if: {class: write}}
`

const strictPolicy = `version: 1
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "* *", class: write}
limits:
  - {name: login-account, by: [account, route], rate: 3/h, if: {class: auth}}
  - {name: user-write, by: [user], rate: 5/h, if: {class: write}}
risk:
  velocity:
    - {name: fails, event: login_failed, by: account, threshold: 3, window: 10m, action: lockout, duration: 15m}
    - {name: dry, event: login_failed, by: account, threshold: 2, window: 10m, action: step_up, duration: 15m, shadow: true}
`

func mustParse(t testing.TB, name, text string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse(name, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// TestReplayerCounts feeds synthetic events straight into a Replayer.
func TestReplayerCounts(t *testing.T) {
	t.Parallel()
	r, err := NewReplayer(Policies{Candidate: mustParse(t, "strict.yaml", strictPolicy), Baseline: mustParse(t, "loose.yaml", loosePolicy),
		CandidateName: "strict.yaml", BaselineName: "loose.yaml"}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ts := t0
	next := func() time.Time { ts = ts.Add(time.Millisecond); return ts }
	login := func(account string) {
		r.Decision(&streams.Decision{TS: next(), Endpoint: "POST /auth/login", IP: "198.51.100.7", Account: account, Cost: 1})
	}
	// alice: 5 logins (2 newly denied), a success; bob: 3 failures (locked), then 2 logins
	for range 5 {
		login("alice")
	}
	r.Report(&streams.Report{TS: next(), Type: streams.ReportLoginSucceeded, Account: "alice"})
	for range 3 {
		r.Report(&streams.Report{TS: next(), Type: streams.ReportLoginFailed, Account: "bob"})
	}
	login("bob")
	login("bob")
	// u1 writes 7 times at cost 1 and once at cost 0: 2 newly denied
	for i := range 8 {
		r.Decision(&streams.Decision{TS: next(), Endpoint: "POST /items", IP: "203.0.113.5", UserID: "u1", Cost: float64(min(1, 7-i))})
	}
	rep := r.Result()
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	t.Log(md.String())
	find := func(class, limit string) Row {
		for _, l := range rep.Limits {
			if l.Class == class && l.Limit == limit {
				return l
			}
		}
		t.Fatalf("no row %s/%s", class, limit)
		return Row{}
	}
	if got, want := find("auth", "login-account"), (Row{Class: "auth", Limit: "login-account", Kind: "bucket", Requests: 7, DeniedCandidate: 2, NewlyDenied: 2}); got != want {
		t.Errorf("login-account %+v, want %+v", got, want)
	}
	if got, want := find("auth", "fails"), (Row{Class: "auth", Limit: "fails", Kind: "lockout", Requests: 2, DeniedCandidate: 2, NewlyDenied: 2}); got != want {
		t.Errorf("fails %+v, want %+v", got, want)
	}
	if got, want := find("write", "user-write"), (Row{Class: "write", Limit: "user-write", Kind: "bucket", Requests: 8, DeniedCandidate: 2, NewlyDenied: 2}); got != want {
		t.Errorf("user-write %+v, want %+v", got, want)
	}
	if got := rep.Total; got.Requests != 15 || got.NewlyDenied != 6 || got.NewlyAllowed != 0 || got.DeniedBaseline != 0 {
		t.Errorf("total %+v", got)
	}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	wantM := []Measure{
		{Rule: "dry", Kind: "step_up", Shadow: true, Candidate: 1, Named: []Named{{Subject: "account", ID: "bob", At: at(8), Until: at(8).Add(15 * time.Minute)}}},
		{Rule: "fails", Kind: "lockout", Candidate: 1, Named: []Named{{Subject: "account", ID: "bob", At: at(9), Until: at(9).Add(15 * time.Minute)}}},
	}
	if fmt.Sprint(rep.Measures) != fmt.Sprint(wantM) {
		t.Errorf("measures %+v, want %+v", rep.Measures, wantM)
	}
	if rep.FalsePositiveIdentities != 1 || rep.LikelyFalsePositives[0].ID != "alice" || rep.LikelyFalsePositives[0].NewlyDenied != 2 {
		t.Errorf("false positives %+v", rep.LikelyFalsePositives)
	}
}

// TestReplayerAttributes: recorded attributes reach the engine, so a
// candidate limit on an attribute applies to the requests that carried it.
func TestReplayerAttributes(t *testing.T) {
	t.Parallel()
	cand := mustParse(t, "attr.yaml", `version: 1
limits:
  - {name: free-plan, by: [user], rate: 2/h, if: {attr: {plan: [free]}}}
  - {name: per-tenant, by: ["attr:tenant"], rate: 100/h}
`)
	r, err := NewReplayer(Policies{Candidate: cand, Baseline: mustParse(t, "loose.yaml", loosePolicy)}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	ts := t0
	for i := range 10 {
		plan := "free"
		if i%2 == 1 {
			plan = "paid"
		}
		ts = ts.Add(time.Millisecond)
		r.Decision(&streams.Decision{TS: ts, Endpoint: "GET /feed", IP: "198.51.100.1", UserID: "u-" + plan, Cost: 1,
			Attributes: map[string]string{"plan": plan, "tenant": "acme"}})
	}
	rep := r.Result()
	got := fmt.Sprintf("%+v", rep.Limits)
	want := "[{Class:default Limit:free-plan Kind:bucket Requests:5 DeniedBaseline:0 DeniedCandidate:3 NewlyDenied:3 NewlyAllowed:0 stamp:0 flags:0} " +
		"{Class:default Limit:per-tenant Kind:bucket Requests:10 DeniedBaseline:0 DeniedCandidate:0 NewlyDenied:0 NewlyAllowed:0 stamp:0 flags:0} " +
		"{Class:write Limit:user-write Kind:bucket Requests:10 DeniedBaseline:0 DeniedCandidate:0 NewlyDenied:0 NewlyAllowed:0 stamp:0 flags:0}]"
	if got != want {
		t.Errorf("limits\n got %s\nwant %s", got, want)
	}
}

// TestReplayerDeviceVerified: a recorded valid device token counts as it
// did live: the verified multiplier for that request's device, the
// unverified one for the others.
func TestReplayerDeviceVerified(t *testing.T) {
	t.Parallel()
	cand := mustParse(t, "att.yaml", `version: 1
limits:
  - {name: device, by: [device], rate: 4/h}
risk:
  attestation: {verified_multiplier: 2, unverified_multiplier: 0.5, token_key_env: TOLLGATE_TEST_UNUSED}
`)
	r, err := NewReplayer(Policies{Candidate: cand, Baseline: mustParse(t, "loose.yaml", loosePolicy)}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	ts := t0
	for i := range 12 {
		ts = ts.Add(time.Millisecond)
		dev, verified := "d-proven", true
		if i%2 == 1 {
			dev, verified = "d-claimed", false
		}
		r.Decision(&streams.Decision{TS: ts, Endpoint: "GET /feed", IP: "198.51.100.1", DeviceID: dev, DeviceVerified: verified, Cost: 1})
	}
	rep := r.Result()
	got := map[string]int64{}
	for _, x := range rep.MostAffected {
		if x.Subject == "device" {
			got[x.ID] = x.NewlyDenied
		}
	}
	// 6 requests each: 8 tokens for the proven device, 2 for the other
	if got["d-proven"] != 0 || got["d-claimed"] != 4 {
		t.Errorf("newly denied per device %v, want d-claimed 4 and d-proven none", got)
	}
}

// TestReplayerAttestationBudget: an attestation's budget decision
// (attestation_budget, the limiter's second event of an attestation that
// verified and binds a new id) is decided again against
// risk.attestation.max_per_ip alone, and an attestation's route decision
// never takes from it: under a candidate of max_per_ip 3/h, of 5 budget
// events from one address 2 are newly denied by attestation-ip, and the
// route limit sees the 5 route decisions alone.
func TestReplayerAttestationBudget(t *testing.T) {
	t.Parallel()
	cand := mustParse(t, "att.yaml", `version: 1
routes:
  - {match: "* *", class: write}
limits:
  - {name: ip-write, by: [ip], rate: 100/h}
risk:
  attestation: {max_per_ip: 3/h}
`)
	r, err := NewReplayer(Policies{Candidate: cand, Baseline: mustParse(t, "loose.yaml", loosePolicy)}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	ts := t0
	for i := range 5 {
		for _, budget := range []bool{false, true} {
			ts = ts.Add(time.Millisecond)
			r.Decision(&streams.Decision{TS: ts, RequestID: fmt.Sprint("att-", i), Endpoint: "POST /v1/attest/apple", IP: "198.51.100.9",
				Cost: 1, AttestationBudget: budget})
		}
	}
	rows := map[string]Row{}
	for _, row := range r.Result().Limits {
		rows[row.Limit] = row
	}
	if got := rows[policy.AttestationLimitName]; got.Requests != 5 || got.DeniedCandidate != 2 || got.NewlyDenied != 2 {
		t.Errorf("%s row %+v, want 5 requests, 2 newly denied", policy.AttestationLimitName, got)
	}
	if got := rows["ip-write"]; got.Requests != 5 || got.DeniedCandidate != 0 {
		t.Errorf("ip-write row %+v, want the 5 route decisions, none denied", got)
	}
}
