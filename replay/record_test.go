package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/replay"
	"github.com/tollgate-dev/tollgate/service"
	"github.com/tollgate-dev/tollgate/streams"
)

// client is the tests' own HTTP client (not http.DefaultClient, whose idle
// connections a parallel httptest.Server.Close may close).
var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 10 * time.Second}

const loosePolicy = `version: 1
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "* *", class: write}
limits:
  - {name: login-account, by: [account, route], rate: 100/h, if: {class: auth}}
  - {name: user-write, by: [user], rate: 100/h, if: {class: write}}
`

// strictPolicy is loosePolicy with smaller budgets and a shadow velocity
// rule; its rates are per hour so no token refills while the test runs.
const strictPolicy = `version: 1
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "* *", class: write}
limits:
  - {name: login-account, by: [account, route], rate: 3/h, if: {class: auth}}
  - {name: user-write, by: [user], rate: 5/h, if: {class: write}}
risk:
  velocity:
    - {name: dry-failures, event: login_failed, by: account, threshold: 3, window: 10m, action: lockout, duration: 15m, shadow: true}
`

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// startLimiter runs a limiter in process; cfg.Listen and Logger are set here.
func startLimiter(t *testing.T, cfg service.Config) (*service.Running, string) {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	cfg.Logger = slog.New(slog.DiscardHandler)
	if cfg.NATSURL != "" {
		cfg.DecisionsMaxBytes = 16 << 20 // streams reserve storage on the shared server
	}
	ctx, cancel := context.WithCancel(context.Background())
	r, err := service.Start(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		<-r.Done
	})
	return r, "http://" + r.Addr
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

func mustPost(t *testing.T, url, body string, want int) {
	t.Helper()
	if code, b := post(t, url, body); code != want {
		t.Fatalf("POST %s %s: %d %s, want %d", url, body, code, b, want)
	}
}

func load(t *testing.T, path string) *policy.Policy {
	t.Helper()
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func jetStream(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// replayUntil runs replays until the record holds decisions decisions and
// reports reports (the limiter publishes asynchronously), and returns the
// last report.
func replayUntil(t *testing.T, o replay.Options, decisions, reports int64) *replay.Report {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rep, err := replay.Run(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Record.Decisions == decisions && rep.Record.Reports == reports {
			return rep
		}
		if time.Now().After(deadline) {
			t.Fatalf("record holds %d decisions and %d reports, want %d and %d", rep.Record.Decisions, rep.Record.Reports, decisions, reports)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReplayRecordedTraffic records traffic through a running limiter on
// the shared NATS, replays it under a stricter candidate, and checks the
// report against what the test knows each identity sent.
func TestReplayRecordedTraffic(t *testing.T) {
	t.Parallel()
	stream, subj := testenv.SharedStreams(t)
	loosePath, strictPath := writeFile(t, "loose.yaml", loosePolicy), writeFile(t, "strict.yaml", strictPolicy)
	r, base := startLimiter(t, service.Config{ConfigPath: loosePath, NATSURL: testenv.NATSURL(), StreamName: stream, SubjectPrefix: subj,
		DecisionsMaxAge: 48 * time.Hour})
	js := jetStream(t, r.NATSURL)
	if ds, err := js.Stream(context.Background(), stream+streams.DecisionsStream); err != nil || ds.CachedInfo().Config.MaxAge != 48*time.Hour {
		t.Fatalf("decisions stream: %v (--decisions-max-age 48h not applied)", err)
	}

	var decisions, reports int64
	// acct-i logs in i times from its own ip: the candidate's 3/h denies i-3.
	for i := 1; i <= 6; i++ {
		for range i {
			mustPost(t, base+"/v1/check", fmt.Sprintf(`{"endpoint":"POST /auth/login","ip":"198.51.100.%d","account":"acct-%d"}`, i, i), 200)
			decisions++
		}
	}
	// acct-5 logs in successfully: its new denials are likely false positives.
	mustPost(t, base+"/v1/report", `{"type":"login_succeeded","account":"acct-5","ip":"198.51.100.5"}`, 202)
	// acct-2 fails 3 times: the candidate's shadow rule fires once.
	for range 3 {
		mustPost(t, base+"/v1/report", `{"type":"login_failed","account":"acct-2"}`, 202)
	}
	reports += 4
	// user-j writes 4*j times; user-1 then asks for 3 tokens more (5/h: denied).
	for j := 1; j <= 3; j++ {
		for range 4 * j {
			mustPost(t, base+"/v1/check", fmt.Sprintf(`{"endpoint":"POST /items","ip":"203.0.113.%d","user_id":"user-%d"}`, j, j), 200)
			decisions++
		}
	}
	mustPost(t, base+"/v1/check", `{"endpoint":"POST /items","ip":"203.0.113.1","user_id":"user-1","cost":3}`, 200)
	decisions++
	// six decisions recorded before events carried a cost: they replay at cost 1.
	publishOld(t, r.NATSURL, subj, 6)
	decisions += 6

	o := replay.Options{
		Policies:  replay.Policies{Candidate: load(t, strictPath), Baseline: load(t, loosePath), CandidateName: "strict.yaml", BaselineName: "loose.yaml"},
		JetStream: js, Streams: streams.Config{Name: stream, Prefix: subj},
	}
	rep := replayUntil(t, o, decisions, reports)

	// login-account: 21 requests, 0+0+0+1+2+3 newly denied.
	// user-write: 4+8+12 requests + user-1's cost 3 + 6 old ones; newly
	// denied 0+3+7, user-1's cost-3 request, and the 6th old one.
	wantRows := []replay.Row{
		{Class: "auth", Limit: "login-account", Kind: "bucket", Requests: 21, DeniedCandidate: 6, NewlyDenied: 6},
		{Class: "write", Limit: "user-write", Kind: "bucket", Requests: 31, DeniedCandidate: 12, NewlyDenied: 12},
	}
	if got := fmt.Sprintf("%+v", rep.Limits); got != fmt.Sprintf("%+v", wantRows) {
		t.Errorf("limits\n got %s\nwant %+v", got, wantRows)
	}
	wantTotal := replay.Row{Class: "all", Requests: 52, DeniedCandidate: 18, NewlyDenied: 18}
	if rep.Total != wantTotal {
		t.Errorf("total %+v, want %+v", rep.Total, wantTotal)
	}
	if got, want := measures(rep.Measures), "dry-failures lockout shadow=true 0/1 [account:acct-2]"; got != want {
		t.Errorf("measures %s, want %s", got, want)
	}
	var top []string
	for _, x := range rep.MostAffected {
		top = append(top, fmt.Sprintf("%s:%s=%d", x.Subject, x.ID, x.NewlyDenied))
	}
	wantTop := "ip:203.0.113.3=7 user:user-3=7 account:acct-6=3 ip:198.51.100.6=3 ip:203.0.113.2=3 user:user-2=3 " +
		"account:acct-5=2 ip:198.51.100.5=2 account:acct-4=1 ip:192.0.2.9=1"
	if got := strings.Join(top, " "); got != wantTop {
		t.Errorf("most affected\n got %s\nwant %s", got, wantTop)
	}
	var fps []string
	for _, x := range rep.LikelyFalsePositives {
		fps = append(fps, fmt.Sprintf("%s:%s=%d", x.Subject, x.ID, x.NewlyDenied))
	}
	if got := strings.Join(fps, " "); got != "account:acct-5=2 ip:198.51.100.5=2" || rep.FalsePositiveIdentities != 2 || rep.FalsePositiveDenials != 4 {
		t.Errorf("false positives %s (%d identities, %d denials)", got, rep.FalsePositiveIdentities, rep.FalsePositiveDenials)
	}

	// The same record gives the same bytes: a second run (with progress
	// lines), --since, and the command.
	md1, js1 := render(t, rep)
	var progress bytes.Buffer
	o2 := o
	o2.Progress, o2.ProgressEvery = &progress, time.Nanosecond
	rep2, err := replay.Run(context.Background(), o2)
	if err != nil {
		t.Fatal(err)
	}
	if md2, js2 := render(t, rep2); md2 != md1 || js2 != js1 {
		t.Errorf("second run differs:\n%s\n----\n%s", md1, md2)
	}
	if !strings.Contains(progress.String(), "replay: decisions ") || !strings.Contains(progress.String(), " events/s") {
		t.Errorf("progress %q", progress.String())
	}
	o2 = o
	o2.Range = replay.Range{Since: time.Hour}
	if rep3, err := replay.Run(context.Background(), o2); err != nil || func() string { m, _ := render(t, rep3); return m }() != md1 {
		t.Errorf("--since 1h: %v", err)
	}
	// --since shorter than the time since the last decision: nothing in range.
	o2.Range = replay.Range{Since: time.Nanosecond}
	if rep5, err := replay.Run(context.Background(), o2); err != nil || rep5.Record.Decisions != 0 || rep5.Record.Reports != 0 {
		t.Errorf("--since 1ns: %v %+v", err, rep5.Record)
	}
	// --from-seq: from the last message only; past the end: an error.
	o2.Range = replay.Range{FromSeq: rep.Record.LastSeq}
	if rep4, err := replay.Run(context.Background(), o2); err != nil || rep4.Record.FirstSeq != rep.Record.LastSeq || rep4.Record.Decisions == 0 || rep4.Record.Decisions >= decisions {
		t.Errorf("--from-seq %d: %v %+v", rep.Record.LastSeq, err, rep4.Record)
	}
	o2.Range = replay.Range{FromSeq: rep.Record.LastSeq + 1}
	if _, err := replay.Run(context.Background(), o2); err == nil || !strings.Contains(err.Error(), "is after the last decision") {
		t.Errorf("--from-seq past the end: %v", err)
	}
	args := []string{"--nats", r.NATSURL, "--config", strictPath, "--baseline", loosePath, "--stream-name", stream, "--subject-prefix", subj}
	cmdMD := command(t, args...)
	cmdJS := command(t, append(args, "--json")...)
	want := strings.NewReplacer("`strict.yaml`", "`"+strictPath+"`", "`loose.yaml`", "`"+loosePath+"`").Replace(md1)
	if cmdMD != want {
		t.Errorf("limiter replay printed\n%s\nwant\n%s", cmdMD, want)
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(cmdJS), &obj); err != nil || obj["total"].(map[string]any)["newly_denied"] != 18.0 {
		t.Errorf("--json: %v %s", err, cmdJS)
	}
}

// publishOld publishes n decisions of user-old in the first schema, which
// had no cost, as one batch.
func publishOld(t *testing.T, url, subj string, n int) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	var b strings.Builder
	b.WriteString(`{"v":1,"decisions":[`)
	ts := time.Now().UTC()
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"ts":%q,"request_id":"old%d","endpoint":"POST /items","class":"write","route":"* *","limit":"user-write","allowed":true,"result":"allowed","remaining":1,"ip":"192.0.2.9","asn":"","user_id":"user-old","device_id":"","account":""}`,
			ts.Add(time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano), i)
	}
	b.WriteString(`]}`)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, subj+"decisions.write", []byte(b.String())); err != nil {
		t.Fatal(err)
	}
}

func render(t *testing.T, rep *replay.Report) (md, js string) {
	t.Helper()
	var a, b bytes.Buffer
	if err := rep.WriteMarkdown(&a); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	return a.String(), b.String()
}

// command runs `limiter replay` and returns its stdout.
func command(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	noEnv := func(string) (string, bool) { return "", false }
	if code := replay.Command(context.Background(), append(args, "--quiet"), noEnv, &out, &errOut); code != 0 {
		t.Fatalf("limiter replay %v: exit %d: %s", args, code, errOut.String())
	}
	return out.String()
}

// TestReplayEmptyAndMissing: an empty record gives an empty report; a
// stream that does not exist is an error naming it.
func TestReplayEmptyAndMissing(t *testing.T) {
	t.Parallel()
	stream, subj := testenv.SharedStreams(t)
	js := jetStream(t, testenv.NATSURL())
	cfg := streams.Config{Name: stream, Prefix: subj, DecisionsMaxBytes: 1 << 20}
	o := replay.Options{Policies: replay.Policies{Candidate: policy.Default(), Baseline: policy.Default()}, JetStream: js, Streams: cfg}
	if _, err := replay.Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), stream+"_DECISIONS") {
		t.Fatalf("missing stream: %v", err)
	}
	if err := streams.EnsureStreams(context.Background(), js, cfg); err != nil {
		t.Fatal(err)
	}
	rep, err := replay.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Record.Decisions != 0 || rep.Total.Requests != 0 || len(rep.Limits) != 0 || rep.MostAffected == nil {
		t.Fatalf("empty record: %+v", rep)
	}
	if md, _ := render(t, rep); !strings.Contains(md, "0 decisions and 0 reports.") || !strings.Contains(md, "No decision changed.") {
		t.Fatalf("markdown:\n%s", md)
	}
}

// measures renders ms as "rule kind shadow=S baseline/candidate [subject:id ...]"
// per measure, without the times of the named ones (live, not known in advance),
// checking that each named measure lasts from At on.
func measures(ms []replay.Measure) string {
	var out []string
	for _, m := range ms {
		var names []string
		for _, x := range m.Named {
			if !x.Until.After(x.At) {
				names = append(names, "bad-times")
			}
			names = append(names, x.Subject+":"+x.ID)
		}
		out = append(out, fmt.Sprintf("%s %s shadow=%v %d/%d [%s]", m.Rule, m.Kind, m.Shadow, m.Baseline, m.Candidate, strings.Join(names, " ")))
	}
	return strings.Join(out, "; ")
}
