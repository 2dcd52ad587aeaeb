package service

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/alerting"
	"github.com/tollgate-dev/tollgate/internal/testenv"
)

const hookSecret = "whsec-service-test"

// hookEnv is the riskd tests' environment: the webhook's secret is set.
func hookEnv(k string) string {
	if k == "TOLLGATE_WEBHOOK_SECRET" {
		return hookSecret
	}
	return testGetenv(k)
}

// hook is a webhook receiver that checks every signature (as
// docs/alerting.md shows) and keeps the deliveries it answered 200 to.
// While hold is set it keeps requests waiting until they are abandoned.
type hook struct {
	t    *testing.T
	url  string
	mu   sync.Mutex
	hold bool
	seen int // requests received
	got  []alerting.WebhookBody
}

func newHook(t *testing.T) *hook {
	h := &hook{t: t}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.seen++
		hold := h.hold
		h.mu.Unlock()
		if hold {
			<-r.Context().Done()
			return
		}
		if err := verifySignature(hookSecret, r.Header.Get("X-Tollgate-Signature"), body); err != nil {
			t.Errorf("webhook: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var b alerting.WebhookBody
		if err := json.Unmarshal(body, &b); err != nil {
			t.Errorf("webhook body %s: %v", body, err)
		}
		h.mu.Lock()
		h.got = append(h.got, b)
		h.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	h.url = srv.URL
	return h
}

// verifySignature checks "t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>"
// with a 5-minute tolerance.
func verifySignature(secret, header string, body []byte) error {
	var ts, sig string
	for _, kv := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(kv, "=")
		if k == "t" {
			ts = v
		} else if k == "v1" {
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		return fmt.Errorf("bad or stale signature header %q", header)
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	if !hmac.Equal([]byte(sig), []byte(hex.EncodeToString(mac.Sum(nil)))) {
		return fmt.Errorf("signature mismatch (header %q)", header)
	}
	return nil
}

// kinds returns "kind:id" -> deliveries received.
func (h *hook) kinds() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := map[string]int{}
	for _, b := range h.got {
		m[b.Kind+":"+b.SubjectID]++
	}
	return m
}

// alertingSection is loopPolicy's alerting section, to am (Alertmanager's
// base URL, "" for none) and the signed webhook at hookURL.
func alertingSection(am, hookURL string) string {
	s := "alerting:\n"
	if am != "" {
		s += fmt.Sprintf("  alertmanager: {url: %q, labels: {team: security}}\n", am)
	}
	return s + fmt.Sprintf("  webhooks:\n    - {url: %q, secret_env: TOLLGATE_WEBHOOK_SECRET}\n", hookURL)
}

// startAlertRiskd starts a riskd with the webhook's secret in its
// environment and waits until it leads.
func startAlertRiskd(t *testing.T, policyPath, redisURL, keyPrefix, subj, stream string) (context.CancelFunc, *Running) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("TG_DEBUG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	rr, err := StartRiskd(ctx, RiskdConfig{ConfigPath: policyPath, Listen: "127.0.0.1:0", RedisURL: redisURL, NATSURL: testenv.NATSURL(),
		KeyPrefix: keyPrefix, SubjectPrefix: subj, StreamName: stream, DecisionsMaxBytes: 16 << 20, EventsMaxBytes: 16 << 20,
		LeaseTTL: time.Second, Logger: log, Getenv: hookEnv})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-rr.Done })
	eventually(t, 10*time.Second, func() string {
		if _, body := get(t, "http://"+rr.Addr+"/readyz"); !strings.Contains(body, `"status":"ready"`) {
			return "riskd: " + body
		}
		return ""
	})
	return cancel, rr
}

// amAlert is what Alertmanager's GET /api/v2/alerts lists.
type amAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	EndsAt      time.Time         `json:"endsAt"`
	Status      struct {
		State string `json:"state"`
	} `json:"status"`
}

// amAlerts returns Alertmanager's alerts by alertname:id.
func amAlerts(t *testing.T, addr string) map[string]amAlert {
	t.Helper()
	code, body := get(t, "http://"+addr+"/api/v2/alerts")
	if code != 200 {
		t.Fatalf("GET /api/v2/alerts: %d %s", code, body)
	}
	var list []amAlert
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	m := map[string]amAlert{}
	for _, a := range list {
		m[a.Labels["alertname"]+":"+a.Labels["id"]] = a
	}
	return m
}

// TestRiskdAlertsReachAlertmanagerAndWebhooks: a lockout (failed-login
// reports) and an anomaly (a device spike) fired by riskd over real Redis
// and NATS arrive in a real Alertmanager, with the labels, annotations and
// endsAt of 7.2, and on a signed webhook.
func TestRiskdAlertsReachAlertmanagerAndWebhooks(t *testing.T) {
	t.Parallel()
	am := testenv.StartAlertmanager(t, "route: {receiver: none}\nreceivers: [{name: none}]\n")
	h := newHook(t)
	_, keyPrefix := testenv.Redis(t)
	stream, subj := testenv.SharedStreams(t)
	policyPath := writePolicy(t, loopPolicy+alertingSection("http://"+am.Addr, h.url))
	redisURL := "redis://" + testenv.RedisAddr() + "/0"
	_, base := start(t, Config{ConfigPath: policyPath, RedisURL: redisURL, NATSURL: testenv.NATSURL(),
		KeyPrefix: keyPrefix, SubjectPrefix: subj, StreamName: stream, Getenv: hookEnv})
	_, rr := startAlertRiskd(t, policyPath, redisURL, keyPrefix, subj, stream)

	reportFailedLogins(t, base, "alice", 3)
	for range 60 {
		post(t, base+"/v1/check", `{"endpoint":"POST /x","ip":"203.0.113.1","device_id":"d-spike"}`)
	}
	var got map[string]amAlert
	eventually(t, 15*time.Second, func() string {
		got = amAlerts(t, am.Addr)
		if _, ok := got["TollgateLockout:alice"]; !ok {
			return "no lockout in Alertmanager: " + toJSON(got)
		}
		if _, ok := got["TollgateAnomaly:d-spike"]; !ok {
			return "no anomaly in Alertmanager: " + toJSON(got)
		}
		return ""
	})
	lock, anom := got["TollgateLockout:alice"], got["TollgateAnomaly:d-spike"]
	wantLock := map[string]string{"alertname": "TollgateLockout", "kind": "lockout", "subject": "account", "id": "alice",
		"rule": "account-failures", "severity": "critical", "team": "security"}
	if toJSON(lock.Labels) != toJSON(wantLock) {
		t.Errorf("lockout labels %v, want %v", lock.Labels, wantLock)
	}
	// the spike sends no device token: signals count it on the claim subject (7.1)
	if anom.Labels["severity"] != "warning" || anom.Labels["kind"] != "anomaly" || anom.Labels["subject"] != "claim" || anom.Labels["team"] != "security" {
		t.Errorf("anomaly labels %v", anom.Labels)
	}
	for name, a := range map[string]amAlert{"lockout": lock, "anomaly": anom} {
		if a.Status.State != "active" || a.Annotations["summary"] == "" || !strings.HasPrefix(a.Annotations["description"], "Tollgate "+name) {
			t.Errorf("%s: state %q, annotations %v", name, a.Status.State, a.Annotations)
		}
		// endsAt is the measure's expiry: 15 minutes after it fired.
		if d := a.EndsAt.Sub(a.StartsAt); d < 14*time.Minute || d > 16*time.Minute {
			t.Errorf("%s: startsAt %v endsAt %v, want 15m apart", name, a.StartsAt, a.EndsAt)
		}
	}
	eventually(t, 15*time.Second, func() string {
		if k := h.kinds(); k["lockout:alice"] < 1 || k["anomaly:d-spike"] < 1 {
			return "webhook got " + toJSON(k)
		}
		return ""
	})
	eventually(t, 5*time.Second, func() string {
		_, m := get(t, "http://"+rr.Addr+"/metrics")
		// lockout, anomaly, and the repeat offender the spike's IP became
		// (limit tiny denied it 59 times)
		for _, want := range []string{`tollgate_alert_deliveries_total{result="delivered",sink="alertmanager"} 3`,
			`tollgate_alert_deliveries_total{result="delivered",sink="webhooks[0]"} 3`, "tollgate_alert_delivery_pending 0"} {
			if !strings.Contains(m, want) {
				return "metrics lack " + want
			}
		}
		return ""
	})
}

// TestRiskdRestartMidDeliveryLosesNothing: riskd stops while its
// deliveries hang on a receiver that does not answer; the next riskd
// delivers every one of those alerts.
func TestRiskdRestartMidDeliveryLosesNothing(t *testing.T) {
	t.Parallel()
	h := newHook(t)
	h.hold = true
	_, keyPrefix := testenv.Redis(t)
	stream, subj := testenv.SharedStreams(t)
	policyPath := writePolicy(t, loopPolicy+alertingSection("", h.url))
	redisURL := "redis://" + testenv.RedisAddr() + "/0"
	_, base := start(t, Config{ConfigPath: policyPath, RedisURL: redisURL, NATSURL: testenv.NATSURL(),
		KeyPrefix: keyPrefix, SubjectPrefix: subj, StreamName: stream, Getenv: hookEnv})
	stopA, a := startAlertRiskd(t, policyPath, redisURL, keyPrefix, subj, stream)
	accounts := []string{"ann", "ben", "cat"}
	for _, acct := range accounts {
		reportFailedLogins(t, base, acct, 3)
	}
	eventually(t, 15*time.Second, func() string {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.seen < len(accounts) {
			return fmt.Sprintf("receiver saw %d deliveries, want %d", h.seen, len(accounts))
		}
		return ""
	})
	stopA()
	<-a.Done
	h.mu.Lock()
	h.hold = false
	if len(h.got) != 0 {
		t.Fatalf("delivered while held: %v", h.got)
	}
	h.mu.Unlock()
	startAlertRiskd(t, policyPath, redisURL, keyPrefix, subj, stream)
	eventually(t, 15*time.Second, func() string {
		k := h.kinds()
		for _, acct := range accounts {
			if k["lockout:"+acct] < 1 {
				return "after the restart the webhook got " + toJSON(k) + toJSON(h.snapshot())
			}
		}
		return ""
	})
}

// TestOneProcessDeliversAndReloads: the one-process limiter delivers
// too, and a reloaded alerting section takes effect for the next alert;
// a reload naming an unset secret_env is refused (FILE:LINE) and the
// running section stays.
func TestOneProcessDeliversAndReloads(t *testing.T) {
	t.Parallel()
	first, second := newHook(t), newHook(t)
	policyPath := writePolicy(t, loopPolicy+alertingSection("", first.url))
	_, base := start(t, Config{ConfigPath: policyPath, Getenv: hookEnv, WatchInterval: 20 * time.Millisecond})
	reportFailedLogins(t, base, "dora", 3)
	eventually(t, 15*time.Second, func() string {
		if first.kinds()["lockout:dora"] != 1 {
			return "first webhook got " + toJSON(first.kinds())
		}
		return ""
	})
	bad := loopPolicy + alertingSection("", second.url) + "    - {url: \"http://127.0.0.1:9/x\", secret_env: UNSET_SECRET_FOR_TEST}\n"
	if err := os.WriteFile(policyPath, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() string {
		if _, m := get(t, base+"/metrics"); !strings.Contains(m, `tollgate_policy_reloads_total{result="error"} 1`) {
			return "the reload naming an unset secret_env was not refused"
		}
		return ""
	})
	if err := os.WriteFile(policyPath, []byte(loopPolicy+alertingSection("", second.url)+"# reloaded\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() string {
		if _, m := get(t, base+"/metrics"); !strings.Contains(m, `tollgate_policy_reloads_total{result="ok"} 1`) {
			return "not reloaded"
		}
		return ""
	})
	reportFailedLogins(t, base, "eve", 3)
	eventually(t, 15*time.Second, func() string {
		if second.kinds()["lockout:eve"] != 1 {
			return "second webhook got " + toJSON(second.kinds())
		}
		return ""
	})
	if first.kinds()["lockout:eve"] != 0 {
		t.Error("the old webhook still got alerts after the reload")
	}
}

// snapshot returns the deliveries received.
func (h *hook) snapshot() []alerting.WebhookBody {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]alerting.WebhookBody(nil), h.got...)
}
