package replay

import (
	"fmt"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/streams"
)

// AdminPolicy is the policy of the admin-change tests, here and in
// admin_test.go (package replay_test): a lockout that spares trusted
// devices, and a feed limit of 4/h per user.
const AdminPolicy = `version: 1
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "* *", class: feed}
limits:
  - {name: login-account, by: [account, route], rate: 100/h, if: {class: auth}}
  - {name: user-feed, by: [user], rate: 4/h, if: {class: feed}}
risk:
  velocity:
    - {name: fails, event: login_failed, by: account, threshold: 3, window: 10m, action: lockout, duration: 15m, exempt_attested: true}
  attestation: {valid_for: 24h}
`

// TestReplayerAdminChanges: the audit stream's changes apply at their
// times, as they did live. alice trusts d1 and d3 (logins that proved
// them), then is locked out; her trusted devices get in, d2 does not.
// An admin revokes d1's trust: d1 is refused, and a later login with its
// token from before the revocation trusts nothing (riskd's rule), one with
// a token issued after does (past the revocation's clock skew). The admin forgets d3's attestation: d3 is
// refused. The admin lifts the lockout: d2 gets in. A user blocked by hand
// (multiplier 0) is refused until the multiplier is cleared. Without the
// audit stream every device of alice's would have got in but d2, twice,
// and u2 never been refused.
func TestReplayerAdminChanges(t *testing.T) {
	t.Parallel()
	p := mustParse(t, "admin.yaml", AdminPolicy)
	r, err := NewReplayer(Policies{Candidate: p, Baseline: p}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	ts := t0
	step := func() time.Time { ts = ts.Add(time.Millisecond); return ts }
	login := func(dev string, tokenExpires time.Time) {
		r.Report(&streams.Report{TS: step(), Type: streams.ReportLoginSucceeded, Account: "alice", DeviceID: dev, Attested: true, TokenExpires: tokenExpires})
	}
	var got []string
	check := func(dev string) {
		r.Decision(&streams.Decision{TS: step(), Endpoint: "POST /auth/login", IP: "198.51.100.1", Account: "alice", DeviceID: dev, DeviceVerified: true, Cost: 1})
		got = append(got, fmt.Sprintf("%s:%v", dev, !denied(r.sims[base].d.Outcome)))
	}
	feed := func(user string) {
		r.Decision(&streams.Decision{TS: step(), Endpoint: "GET /feed", IP: "198.51.100.2", UserID: user, Cost: 1})
		got = append(got, fmt.Sprintf("%s:%v", user, !denied(r.sims[base].d.Outcome)))
	}
	audit := func(a streams.Audit) {
		a.TS = step()
		r.Audit(&a)
	}
	issued := ts.Add(24 * time.Hour) // tokens of the first logins: valid_for from now
	login("d1", issued)
	login("d3", issued)
	for range 3 {
		r.Report(&streams.Report{TS: step(), Type: streams.ReportLoginFailed, Account: "alice", IP: "203.0.113.9"})
	}
	check("d1")
	check("d2")
	check("d3")
	audit(streams.Audit{Action: streams.AuditTrustRevoke, Subject: "account", ID: "alice", DeviceID: "d1"})
	check("d1")
	login("d1", issued) // the stolen phone's token, issued before the revocation
	check("d1")
	ts = ts.Add(2 * time.Minute)      // past the revocation's clock skew (a login within it trusts nothing)
	login("d1", ts.Add(25*time.Hour)) // attested again after it
	check("d1")
	audit(streams.Audit{Action: streams.AuditAttestationForget, Subject: "device", ID: "d3"})
	check("d3")
	audit(streams.Audit{Action: streams.AuditLockoutLift, Subject: "account", ID: "alice"})
	check("d2")
	zero := 0.0
	audit(streams.Audit{Action: streams.AuditMultiplierSet, Subject: "user", ID: "u2", Value: &zero})
	feed("u2")
	feed("u1")
	audit(streams.Audit{Action: streams.AuditMultiplierClear, Subject: "user", ID: "u2"})
	feed("u2")
	r.Audit(&streams.Audit{Action: streams.AuditLockoutLift, ID: "alice"}) // no time: skipped

	want := fmt.Sprint([]string{"d1:true", "d2:false", "d3:true", "d1:false", "d1:false", "d1:true", "d3:false", "d2:true", "u2:false", "u1:true", "u2:true"})
	if fmt.Sprint(got) != want {
		t.Errorf("answers\n got %v\nwant %s", got, want)
	}
	rep := r.Result()
	if rep.Record.AdminChanges != 5 || rep.Record.Skipped != 1 {
		t.Errorf("record %+v, want 5 admin changes and 1 skipped", rep.Record)
	}
	rows := map[string]Row{}
	for _, row := range rep.Limits {
		rows[row.Limit] = row
	}
	if got := rows["fails"]; got.DeniedBaseline != 4 || got.DeniedCandidate != 4 || got.NewlyDenied != 0 {
		t.Errorf("fails row %+v, want 4 denied under both", got)
	}
	if got := rows["user-feed"]; got.Requests != 3 || got.DeniedBaseline != 1 {
		t.Errorf("user-feed row %+v, want 3 requests, 1 denied", got)
	}
}

// TestCollectWholeKeepsTheNewest: past its bound the replay holds the
// newest admin changes, oldest first, and counts the others, holding at
// most twice the bound while it reads.
func TestCollectWholeKeepsTheNewest(t *testing.T) {
	t.Parallel()
	ch := make(chan []event, 8)
	for c := range 5 {
		chunk := make([]event, 3)
		for i := range chunk {
			chunk[i].ns = int64(c*3 + i)
		}
		ch <- chunk
	}
	close(ch)
	evs, dropped := collectWhole(ch, 4)
	var ns []int64
	for _, e := range evs {
		ns = append(ns, e.ns)
	}
	if fmt.Sprint(ns) != "[11 12 13 14]" || dropped != 11 {
		t.Errorf("kept %v, dropped %d; want [11 12 13 14], 11", ns, dropped)
	}
}
