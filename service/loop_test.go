package service

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/streams"
)

const loopPolicy = `version: 1
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "* *", class: write}
limits:
  - {name: login-account, by: [account, route], rate: 1000/min, if: {class: auth}}
  - {name: device, by: [device], rate: 600/min}
  - {name: tiny, by: [ip], rate: 1/h, if: {class: write, authenticated: false}}
failure_mode: {default: open, auth: closed}
risk:
  velocity:
    - {name: account-failures, event: login_failed, by: account, threshold: 3, window: 10m, action: lockout, duration: 15m}
  anomaly: {by: device, factor: 10, short_window: 2s, long_window: 60s, min_baseline: 1/s, multiplier: 0.05, duration: 15m}
  repeat_offender: {per_minute: 5}
`

func writePolicy(t *testing.T, text string) string { return writePolicyB(t, text) }

func writePolicyB(t testing.TB, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// alerts subscribes to every alert on url.
type alertLog struct {
	mu   sync.Mutex
	list []streams.Alert
}

func watchAlerts(t *testing.T, url, prefix string) *alertLog {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	l := &alertLog{}
	if _, err := nc.Subscribe(prefix+"alerts.>", func(m *nats.Msg) {
		var a streams.Alert
		if json.Unmarshal(m.Data, &a) == nil {
			l.mu.Lock()
			l.list = append(l.list, a)
			l.mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	return l
}

func (l *alertLog) kinds() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := map[string]int{}
	for _, a := range l.list {
		m[a.Kind+":"+a.SubjectID]++
	}
	return m
}

func adminGet(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String()
}

func adminDelete(t *testing.T, url, token string) int {
	t.Helper()
	req, _ := http.NewRequest("DELETE", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestLoopOneProcess runs the whole loop in one process (memory store,
// embedded NATS, in-process risk engine): the 3rd failed login locks the
// account, the admin API lifts it; a 100x device spike is throttled and
// alerted while a normal device is untouched; repeat offenders are listed.
func TestLoopOneProcess(t *testing.T) {
	t.Parallel()
	r, base := start(t, Config{ConfigPath: writePolicy(t, loopPolicy), AdminToken: "tok"})
	alerts := watchAlerts(t, r.NATSURL, "tollgate.")
	login := `{"endpoint":"POST /auth/login","ip":"198.51.100.7","account":"alice"}`

	for i := 0; i < 2; i++ {
		if resp, body := post(t, base+"/v1/report", `{"type":"login_failed","account":"alice","ip":"198.51.100.7"}`); resp.StatusCode != 202 || !strings.Contains(body, `"accepted":true`) {
			t.Fatalf("report: %d %s", resp.StatusCode, body)
		}
	}
	// two failures are under the threshold: still allowed
	if resp, _ := post(t, base+"/v1/check", login); resp.StatusCode != 200 {
		t.Fatalf("after 2 failures: %d", resp.StatusCode)
	}
	post(t, base+"/v1/report", `{"type":"login_failed","account":"alice","ip":"198.51.100.7"}`)
	eventually(t, 5*time.Second, func() string {
		resp, body := post(t, base+"/v1/check", login)
		if resp.StatusCode != 429 || !strings.Contains(body, `"code":"ACCOUNT_LOCKED"`) || !strings.Contains(body, `"rule":"account-failures"`) {
			return "not locked: " + body
		}
		if ra := resp.Header.Get("Retry-After"); ra != "900" && ra != "899" {
			return "Retry-After " + ra
		}
		return ""
	})
	// bob is not locked
	if resp, _ := post(t, base+"/v1/check", `{"endpoint":"POST /auth/login","ip":"198.51.100.7","account":"bob"}`); resp.StatusCode != 200 {
		t.Fatalf("bob: %d", resp.StatusCode)
	}
	if code, body := adminGet(t, base+"/v1/admin/subjects/account/alice", "tok"); code != 200 || !strings.Contains(body, `"lockout":{"kind":"lockout","rule":"account-failures"`) {
		t.Fatalf("subject: %d %s", code, body)
	}
	if code := adminDelete(t, base+"/v1/admin/lockouts/alice", "tok"); code != 200 {
		t.Fatalf("lift: %d", code)
	}
	if resp, _ := post(t, base+"/v1/check", login); resp.StatusCode != 200 {
		t.Fatalf("after lift: %d", resp.StatusCode)
	}

	// anomaly: 60 decisions in well under 2 s is >= 10x the 1/s floor
	for i := 0; i < 60; i++ {
		post(t, base+"/v1/check", `{"endpoint":"POST /x","ip":"203.0.113.1","device_id":"d-spike"}`)
	}
	for i := 0; i < 3; i++ {
		post(t, base+"/v1/check", `{"endpoint":"POST /x","ip":"203.0.113.2","device_id":"d-normal"}`)
	}
	eventually(t, 5*time.Second, func() string {
		// token-less requests naming d-spike: the claims of its id are throttled (7.1)
		if _, body := adminGet(t, base+"/v1/admin/subjects/claim/d-spike", "tok"); !strings.Contains(body, `"effective":0.05`) {
			return "spike not throttled: " + body
		}
		return ""
	})
	resp, _ := post(t, base+"/v1/check", `{"endpoint":"POST /x","ip":"203.0.113.3","user_id":"u1","device_id":"d-spike"}`)
	if resp.Header.Get("X-RateLimit-Limit") != "30" {
		t.Fatalf("throttled device limit %s, want 30 (600 x 0.05)", resp.Header.Get("X-RateLimit-Limit"))
	}
	if _, body := adminGet(t, base+"/v1/admin/subjects/device/d-normal", "tok"); !strings.Contains(body, `"effective":1,`) {
		t.Fatalf("normal device touched: %s", body)
	}

	// repeat offenders: 203.0.113.1 was denied by "tiny" 59 times this minute
	eventually(t, 5*time.Second, func() string {
		_, body := adminGet(t, base+"/v1/admin/offenders", "tok")
		if !strings.Contains(body, `{"limit":"tiny","key":"203.0.113.1","count":59`) {
			return "offenders: " + body
		}
		return ""
	})
	eventually(t, 5*time.Second, func() string {
		k := alerts.kinds()
		if k["lockout:alice"] != 1 || k["anomaly:d-spike"] != 1 || k["repeat_offender:203.0.113.1"] != 1 || k["anomaly:d-normal"] != 0 {
			return "alerts " + toJSON(k)
		}
		return ""
	})
}

func toJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

const stepUpPolicy = `version: 1
routes:
  - {match: "POST /auth/login", class: auth}
limits:
  - {name: login-account, by: [account, route], rate: 1000/min, if: {class: auth}}
risk:
  velocity:
    - {name: suspicious, event: login_failed, by: account, threshold: 2, window: 10m, action: step_up, duration: 1h}
`

func TestStepUpLoop(t *testing.T) {
	t.Parallel()
	_, base := start(t, Config{ConfigPath: writePolicy(t, stepUpPolicy)})
	login := `{"endpoint":"POST /auth/login","ip":"198.51.100.7","account":"carol"}`
	post(t, base+"/v1/report", `{"type":"login_failed","account":"carol"}`)
	post(t, base+"/v1/report", `{"type":"login_failed","account":"carol"}`)
	eventually(t, 5*time.Second, func() string {
		resp, body := post(t, base+"/v1/check", login)
		if resp.StatusCode != 403 || !strings.Contains(body, `"code":"STEP_UP_REQUIRED"`) {
			return "no step-up: " + body
		}
		return ""
	})
	post(t, base+"/v1/report", `{"type":"step_up_passed","account":"carol"}`)
	eventually(t, 5*time.Second, func() string {
		if resp, body := post(t, base+"/v1/check", login); resp.StatusCode != 200 {
			return "still " + body
		}
		return ""
	})
}

// TestRiskdRestartLosesNothing runs limiter and riskd as separate
// services on the shared NATS and Redis. riskd is stopped mid-stream and
// restarted: the failure sent while it was down counts, and the ones it
// had processed are not counted twice.
func TestRiskdRestartLosesNothing(t *testing.T) {
	t.Parallel()
	_, keyPrefix := testenv.Redis(t)
	stream, subj := testenv.SharedStreams(t)
	policyPath := writePolicy(t, strings.Replace(loopPolicy, "threshold: 3", "threshold: 4", 1))
	redisURL := "redis://" + testenv.RedisAddr() + "/0"
	_, base := start(t, Config{ConfigPath: policyPath, RedisURL: redisURL, NATSURL: testenv.NATSURL(),
		KeyPrefix: keyPrefix, SubjectPrefix: subj, StreamName: stream, AdminToken: "tok"})

	startRiskd := func() (context.CancelFunc, *Running) {
		return startRiskdFor(t, policyPath, redisURL, keyPrefix, subj, stream, true)
	}
	report := func() { t.Helper(); reportFailedLogins(t, base, "dave", 1) }
	locked := func() bool { t.Helper(); return loginLocked(t, base, "dave") }
	stop, rr := startRiskd()
	report()
	report()
	eventually(t, 5*time.Second, func() string {
		_, m := get(t, "http://"+rr.Addr+"/metrics")
		if !strings.Contains(m, `tollgate_riskd_events_total{type="report"} 2`) {
			return "riskd has not processed 2 reports"
		}
		return ""
	})
	stop()
	<-rr.Done
	report() // while riskd is down
	stop, rr = startRiskd()
	defer func() { stop(); <-rr.Done }()
	// 3 failures in all: the restarted riskd must not have counted the first two twice
	eventually(t, 5*time.Second, func() string {
		_, m := get(t, "http://"+rr.Addr+"/metrics")
		if !strings.Contains(m, `tollgate_riskd_events_total{type="report"} 1`) {
			return "restarted riskd has not processed the report sent while it was down"
		}
		return ""
	})
	if locked() {
		t.Fatal("locked after 3 failures of a threshold of 4: events were counted twice")
	}
	report()
	eventually(t, 5*time.Second, func() string {
		if !locked() {
			return "not locked after the 4th failure: an event was lost"
		}
		return ""
	})
}

// startRiskdFor starts a riskd on the shared NATS and Redis; with
// waitLeader it waits until this instance leads and has replayed.
func startRiskdB(t testing.TB, policyPath, redisURL, keyPrefix, subj, stream string) (context.CancelFunc, *Running) {
	return startRiskdFor(t, policyPath, redisURL, keyPrefix, subj, stream, true)
}

func startRiskdFor(t testing.TB, policyPath, redisURL, keyPrefix, subj, stream string, waitLeader bool) (context.CancelFunc, *Running) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rr, err := StartRiskd(ctx, RiskdConfig{ConfigPath: policyPath, Listen: "127.0.0.1:0", RedisURL: redisURL, NATSURL: testenv.NATSURL(),
		KeyPrefix: keyPrefix, SubjectPrefix: subj, StreamName: stream, DecisionsMaxBytes: 16 << 20, EventsMaxBytes: 16 << 20, LeaseTTL: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	want := `"status":"standby"`
	if waitLeader {
		want = `"status":"ready"`
	}
	eventually(t, 10*time.Second, func() string {
		if _, body := get(t, "http://"+rr.Addr+"/readyz"); !strings.Contains(body, want) {
			return "riskd: " + body
		}
		return ""
	})
	return cancel, rr
}

// TestTwoRiskdOneVerdict runs two riskd on one stream: one leads, the
// other stands by; one lockout and one alert result, as with one riskd;
// when the leader dies the standby takes over and the loop goes on.
func TestTwoRiskdOneVerdict(t *testing.T) {
	t.Parallel()
	_, keyPrefix := testenv.Redis(t)
	stream, subj := testenv.SharedStreams(t)
	policyPath := writePolicy(t, loopPolicy)
	redisURL := "redis://" + testenv.RedisAddr() + "/0"
	_, base := start(t, Config{ConfigPath: policyPath, RedisURL: redisURL, NATSURL: testenv.NATSURL(),
		KeyPrefix: keyPrefix, SubjectPrefix: subj, StreamName: stream})
	alerts := watchAlerts(t, testenv.NATSURL(), subj)
	stopA, a := startRiskdFor(t, policyPath, redisURL, keyPrefix, subj, stream, true)
	stopB, b := startRiskdFor(t, policyPath, redisURL, keyPrefix, subj, stream, false)
	defer func() { stopB(); <-b.Done }()
	fail := func(account string, n int) { t.Helper(); reportFailedLogins(t, base, account, n) }
	locked := func(account string) string {
		resp, body := post(t, base+"/v1/check", `{"endpoint":"POST /auth/login","ip":"198.51.100.7","account":"`+account+`"}`)
		if resp.StatusCode != 429 {
			return account + " not locked: " + body
		}
		return ""
	}
	fail("erin", 3)
	eventually(t, 5*time.Second, func() string { return locked("erin") })
	eventually(t, 5*time.Second, func() string {
		if k := alerts.kinds(); k["lockout:erin"] != 1 {
			return "alerts " + toJSON(k)
		}
		return ""
	})
	stopA()
	<-a.Done
	eventually(t, 10*time.Second, func() string {
		if _, body := get(t, "http://"+b.Addr+"/readyz"); !strings.Contains(body, `"status":"ready"`) {
			return "standby did not take over: " + body
		}
		return ""
	})
	fail("frank", 3)
	eventually(t, 5*time.Second, func() string { return locked("frank") })
	// the alert follows the lock write: wait for it, then there must be
	// exactly one per lockout (a double count would show two for erin)
	eventually(t, 5*time.Second, func() string {
		if k := alerts.kinds(); k["lockout:erin"] != 1 || k["lockout:frank"] != 1 {
			return "alerts " + toJSON(k) + ": want exactly one per lockout"
		}
		return ""
	})
}

// TestNATSDownNeverFailsRequests kills NATS under the limiter: checks keep
// answering at once, drops are counted, publishing resumes by itself.
func TestNATSDownNeverFailsRequests(t *testing.T) {
	t.Parallel()
	ns := testenv.StartNATS(t)
	_, base := start(t, Config{NATSURL: ns.URL})
	check := `{"endpoint":"GET /feed","ip":"192.0.2.9","user_id":"u_42"}`
	post(t, base+"/v1/check", check)
	ns.Stop()
	for i := 0; i < 200; i++ {
		t0 := time.Now()
		resp, body := post(t, base+"/v1/check", check)
		if resp.StatusCode != 200 {
			t.Fatalf("check %d with NATS down: %d %s", i, resp.StatusCode, body)
		}
		if d := time.Since(t0); d > 500*time.Millisecond {
			t.Fatalf("check took %v with NATS down", d)
		}
	}
	eventually(t, 5*time.Second, func() string {
		_, m := get(t, base+"/metrics")
		if !strings.Contains(m, "tollgate_events_dropped_total") || strings.Contains(m, "tollgate_events_dropped_total 0\n") {
			return "drops not counted"
		}
		return ""
	})
	if code, body := get(t, base+"/readyz"); code != 200 || !strings.Contains(body, `"nats":"down"`) {
		t.Fatalf("readyz: %d %s", code, body)
	}
	ns.Restart(t)
	eventually(t, 10*time.Second, func() string {
		if _, body := get(t, base+"/readyz"); !strings.Contains(body, `"nats":"up"`) {
			return "nats not back"
		}
		return ""
	})
	// after reconnecting, decisions reach the stream again
	nc, err := nats.Connect(ns.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	got := make(chan struct{}, 1)
	sub, _ := nc.Subscribe("tollgate.decisions.>", func(*nats.Msg) {
		select {
		case got <- struct{}{}:
		default:
		}
	})
	defer sub.Unsubscribe()
	_ = nc.Flush()
	eventually(t, 10*time.Second, func() string {
		post(t, base+"/v1/check", check)
		select {
		case <-got:
			return ""
		default:
			return "no decision published after NATS returned"
		}
	})
}

// TestShadowRiskRules: shadow velocity and anomaly rules fire, their alerts
// are published with "shadow": true and counted apart, and nothing is
// enforced: the account is not locked, the device not throttled.
func TestShadowRiskRules(t *testing.T) {
	t.Parallel()
	text := strings.Replace(loopPolicy, "duration: 15m}\n  anomaly", "duration: 15m, shadow: true}\n  anomaly", 1)
	text = strings.Replace(text, "multiplier: 0.05, duration: 15m}", "multiplier: 0.05, duration: 15m, shadow: true}", 1)
	if strings.Count(text, "shadow: true") != 2 {
		t.Fatalf("policy not rewritten:\n%s", text)
	}
	r, base := start(t, Config{ConfigPath: writePolicy(t, text), AdminToken: "tok"})
	alerts := watchAlerts(t, r.NATSURL, "tollgate.")
	for i := 0; i < 3; i++ {
		post(t, base+"/v1/report", `{"type":"login_failed","account":"erin"}`)
	}
	for i := 0; i < 60; i++ {
		post(t, base+"/v1/check", `{"endpoint":"POST /x","ip":"203.0.113.1","device_id":"d-shadow"}`)
	}
	eventually(t, 5*time.Second, func() string {
		_, m := get(t, base+"/metrics")
		if !strings.Contains(m, `tollgate_riskd_shadow_alerts_total{kind="lockout",rule="account-failures"} 1`) ||
			!strings.Contains(m, `tollgate_riskd_shadow_alerts_total{kind="anomaly",rule="anomaly"} 1`) {
			return "shadow alerts not counted"
		}
		if strings.Contains(m, `tollgate_riskd_alerts_total{kind="lockout"}`) || strings.Contains(m, `tollgate_riskd_alerts_total{kind="anomaly"}`) {
			return "shadow alerts counted as enforced"
		}
		return ""
	})
	eventually(t, 5*time.Second, func() string {
		alerts.mu.Lock()
		defer alerts.mu.Unlock()
		n := 0
		for _, a := range alerts.list {
			if (a.Kind == "lockout" || a.Kind == "anomaly") && a.Shadow && strings.HasSuffix(a.Reason, "; shadow rule: not enforced") {
				n++
			}
		}
		if n != 2 {
			return "shadow alerts on NATS: " + toJSON(alerts.list)
		}
		return ""
	})
	if resp, body := post(t, base+"/v1/check", `{"endpoint":"POST /auth/login","ip":"198.51.100.7","account":"erin"}`); resp.StatusCode != 200 {
		t.Fatalf("shadow lockout enforced: %d %s", resp.StatusCode, body)
	}
	if _, body := adminGet(t, base+"/v1/admin/subjects/device/d-shadow", "tok"); !strings.Contains(body, `"effective":1,`) {
		t.Fatalf("shadow anomaly enforced: %s", body)
	}
}
