package replay_test

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/replay"
	"github.com/tollgate-dev/tollgate/service"
	"github.com/tollgate-dev/tollgate/streams"
)

const noRulePolicy = `version: 1
routes:
  - {match: "POST /auth/login", class: auth}
limits:
  - {name: login-account, by: [account, route], rate: 100/h, if: {class: auth}}
`

const ruleRisk = `risk:
  velocity:
    - {name: fails, event: login_failed, by: account, threshold: 3, window: 10m, action: lockout, duration: 15m}
`

// loginTraffic sends account a-k k failed logins (k = 1..6), waits until
// the limiter's risk engine has counted them, then checks two logins per
// account. It returns the accounts whose logins were refused as locked.
func loginTraffic(t *testing.T, base string) []string {
	t.Helper()
	for k := 1; k <= 6; k++ {
		for range k {
			mustPost(t, base+"/v1/report", fmt.Sprintf(`{"type":"login_failed","account":"a-%d"}`, k), 202)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(metrics(t, base), `tollgate_riskd_events_total{type="report"} 21`) {
		if time.Now().After(deadline) {
			t.Fatal("the risk engine did not count 21 reports")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var locked []string
	for k := 1; k <= 6; k++ {
		for range 2 {
			code, body := post(t, base+"/v1/check", fmt.Sprintf(`{"endpoint":"POST /auth/login","ip":"198.51.100.%d","account":"a-%d"}`, k, k))
			switch {
			case code == 429 && strings.Contains(body, `"ACCOUNT_LOCKED"`):
				locked = append(locked, fmt.Sprintf("a-%d", k))
			case code != 200:
				t.Fatalf("check a-%d: %d %s", k, code, body)
			}
		}
	}
	return locked
}

func metrics(t *testing.T, base string) string {
	t.Helper()
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return string(b)
}

// TestReplayPredictsLockouts records login traffic through a limiter
// without a velocity rule, replays it under a candidate with one, and
// checks that the prediction is what a live limiter with that rule then
// does with the same traffic: the same lockouts, the same refused logins.
func TestReplayPredictsLockouts(t *testing.T) {
	t.Parallel()
	p0, p1 := writeFile(t, "p0.yaml", noRulePolicy), writeFile(t, "p1.yaml", noRulePolicy+ruleRisk)

	// Record: one-process limiter (embedded NATS, in-process risk engine) without the rule.
	r0, base0 := startLimiter(t, service.Config{ConfigPath: p0})
	if locked := loginTraffic(t, base0); len(locked) != 0 {
		t.Fatalf("locked without a rule: %v", locked)
	}
	o := replay.Options{
		Policies:  replay.Policies{Candidate: load(t, p1), Baseline: load(t, p0), CandidateName: "p1.yaml", BaselineName: "p0.yaml"},
		JetStream: jetStream(t, r0.NATSURL), Streams: streams.Config{},
	}
	rep := replayUntil(t, o, 12, 21)
	var predicted []string
	for _, x := range rep.MostAffected {
		if x.Subject == "account" && x.NewlyDenied > 0 {
			predicted = append(predicted, strings.Repeat(x.ID+" ", int(x.NewlyDenied)))
		}
	}
	slices.Sort(predicted)

	// Live: the same traffic through a limiter with the rule.
	_, base1 := startLimiter(t, service.Config{ConfigPath: p1})
	locked := loginTraffic(t, base1)
	var live []string
	for _, a := range slices.Compact(slices.Clone(locked)) {
		live = append(live, strings.Repeat(a+" ", strings.Count(strings.Join(locked, " ")+" ", a+" ")))
	}
	if got, want := strings.Join(predicted, ""), strings.Join(live, ""); got != want || want != "a-3 a-3 a-4 a-4 a-5 a-5 a-6 a-6 " {
		t.Errorf("predicted refused logins %q, live %q", got, want)
	}
	liveAlerts := strings.Count(metrics(t, base1), `tollgate_riskd_alerts_total{kind="lockout"} 4`)
	// the report names the accounts the rule locks, as the live limiter did
	wantM := "fails lockout shadow=false 0/4 [account:a-3 account:a-4 account:a-5 account:a-6]"
	if got := measures(rep.Measures); got != wantM || liveAlerts != 1 {
		t.Errorf("predicted lockouts %s, want %s; live metrics have 4 lockout alerts: %v", got, wantM, liveAlerts == 1)
	}
	for _, l := range rep.Limits {
		if l.Limit == "fails" && (l.DeniedCandidate != int64(len(locked)) || l.NewlyDenied != int64(len(locked))) {
			t.Errorf("row %+v, live refused %d", l, len(locked))
		}
	}
}
