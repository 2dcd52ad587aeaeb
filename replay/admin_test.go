package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/replay"
	"github.com/tollgate-dev/tollgate/service"
	"github.com/tollgate-dev/tollgate/streams"
)

// admin sends an admin request with the limiter's token and returns its
// answer.
func admin(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// TestReplayAppliesAdminChanges records traffic through a limiter that an
// admin changes by hand (a lockout lifted, a user's multiplier halved),
// replays it under the live policy, and checks that the replay refuses
// exactly the requests the limiter refused: the audit stream's changes
// apply where they were made. Before replay read the audit stream, it
// refused a-1's logins after the lift (the lock stayed in force for it)
// and none of u1's.
func TestReplayAppliesAdminChanges(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "admin.yaml", replay.AdminPolicy)
	r, base := startLimiter(t, service.Config{ConfigPath: path, AdminToken: "tok"})
	var live []string
	check := func(body string) {
		code, b := post(t, base+"/v1/check", body)
		if code != 200 && code != 429 {
			t.Fatalf("check %s: %d %s", body, code, b)
		}
		live = append(live, fmt.Sprint(code))
	}
	for range 3 {
		mustPost(t, base+"/v1/report", `{"type":"login_failed","account":"a-1"}`, 202)
	}
	// the lock is riskd's to write: wait for it without a check, which
	// the record would hold (and a replay refuse, the lock set at once)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, b := admin(t, "GET", base+"/v1/admin/lockouts", ""); strings.Contains(b, `"a-1"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("riskd did not lock a-1 out")
		}
	}
	login := `{"endpoint":"POST /auth/login","ip":"198.51.100.1","account":"a-1"}`
	check(login)
	check(login)
	if code, b := admin(t, "DELETE", base+"/v1/admin/lockouts/a-1", ""); code != 200 {
		t.Fatalf("lift: %d %s", code, b)
	}
	check(login)
	check(login)
	if code, b := admin(t, "PUT", base+"/v1/admin/multipliers/user/u1", `{"multiplier": 0.5}`); code != 200 {
		t.Fatalf("multiplier: %d %s", code, b)
	}
	for range 4 {
		check(`{"endpoint":"GET /feed","ip":"198.51.100.2","user_id":"u1"}`)
	}
	if got := strings.Join(live, " "); got != "429 429 200 200 200 200 429 429" {
		t.Fatalf("live answers %s", got)
	}

	p := load(t, path)
	o := replay.Options{Policies: replay.Policies{Candidate: p, Baseline: p}, JetStream: jetStream(t, r.NATSURL), Streams: streams.Config{}}
	rep := replayUntil(t, o, 8, 3)
	if rep.Record.AdminChanges != 2 {
		t.Errorf("admin changes applied %d, want 2", rep.Record.AdminChanges)
	}
	rows := map[string]replay.Row{}
	for _, row := range rep.Limits {
		rows[row.Limit] = row
	}
	if got := rows["fails"]; got.DeniedBaseline != 2 {
		t.Errorf("fails row %+v, want the 2 logins refused before the lift", got)
	}
	if got := rows["user-feed"]; got.Requests != 4 || got.DeniedBaseline != 2 {
		t.Errorf("user-feed row %+v, want 4 requests, 2 refused at half the rate", got)
	}
	if rep.Total.DeniedBaseline != 4 {
		t.Errorf("total %+v, want the 4 the limiter refused", rep.Total)
	}
}

// TestReplaySeedsTrustFromJournal: alice's phone was enrolled before the
// record begins (its login is in no replayed report), so only riskd's
// trust journal says the phone is trusted. An attacker locks alice out
// (exempt_attested) and the phone logs in: live, the lockout spared it.
// The replay reads the journal and seeds the enrolments in force at its
// start, so it spares the phone too; d2, never enrolled, is refused. One
// journaled enrolment made after the start is not seeded (its earlier
// state is unknown), and one that ended before it is not either.
func TestReplaySeedsTrustFromJournal(t *testing.T) {
	t.Parallel()
	stream, subj := testenv.SharedStreams(t)
	js := jetStream(t, testenv.NATSURL())
	ctx := context.Background()
	cfg := streams.Config{Name: stream, Prefix: subj, DecisionsMaxBytes: 16 << 20, EventsMaxBytes: 16 << 20}
	if err := streams.EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	publish := func(subject string, v any) {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, subject, b); err != nil {
			t.Fatal(err)
		}
	}
	enrol := func(device string, at, until time.Time) {
		publish(streams.TrustSubject(subj, "alice", device), streams.TrustEnrolment{V: 1, Account: "alice", Device: device, Until: until, At: at})
	}
	enrol("phone", now.Add(-72*time.Hour), now.Add(27*24*time.Hour))
	enrol("tablet", now.Add(time.Hour), now.Add(31*24*time.Hour)) // after the start
	enrol("old", now.Add(-40*24*time.Hour), now.Add(-10*24*time.Hour))
	for i := range 3 {
		publish(subj+"reports.login_failed", streams.Report{V: 1, ID: fmt.Sprint("f", i), TS: now.Add(time.Duration(i) * time.Millisecond),
			Type: streams.ReportLoginFailed, Source: "api", Account: "alice", IP: "203.0.113.9"})
	}
	var b strings.Builder
	b.WriteString(`{"v":1,"decisions":[`)
	for i, dev := range []string{"phone", "d2", "tablet", "old", "phone"} {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"ts":%q,"request_id":"c%d","endpoint":"POST /auth/login","class":"auth","route":"POST /auth/login","limit":"login-account","allowed":true,"result":"allowed","remaining":1,"ip":"198.51.100.1","asn":"","user_id":"","device_id":%q,"device_verified":true,"account":"alice","cost":1}`,
			now.Add(time.Second+time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano), i, dev)
	}
	b.WriteString(`]}`)
	if _, err := js.Publish(ctx, subj+"decisions.auth", []byte(b.String())); err != nil {
		t.Fatal(err)
	}

	p := load(t, writeFile(t, "admin.yaml", replay.AdminPolicy))
	rep := replayUntil(t, replay.Options{Policies: replay.Policies{Candidate: p, Baseline: p}, JetStream: js, Streams: cfg}, 5, 3)
	if rep.Record.TrustedDevices != 1 {
		t.Errorf("trusted devices seeded %d, want 1 (the phone)", rep.Record.TrustedDevices)
	}
	rows := map[string]replay.Row{}
	for _, row := range rep.Limits {
		rows[row.Limit] = row
	}
	if got := rows["fails"]; got.DeniedBaseline != 3 || rep.Total.Requests != 5 || rep.Total.DeniedBaseline != 3 {
		t.Errorf("fails row %+v, total %+v; want 5 requests: d2, the tablet and the old device refused, the phone spared twice", got, rep.Total)
	}
}
