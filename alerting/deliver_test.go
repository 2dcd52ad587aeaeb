package alerting

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

const testSecret = "whsec-test"

// receiver is a webhook test server: it answers each request with the
// next of its codes (then 200), verifies signatures, and keeps what it
// answered 2xx to.
type receiver struct {
	t     *testing.T
	srv   *httptest.Server
	mu    sync.Mutex
	codes []int
	block chan struct{} // when not nil, requests wait for it to close
	got   []WebhookBody // bodies answered 2xx, in order
	raw   []string      // raw bodies answered 2xx
	tried int           // requests seen
}

func newReceiver(t *testing.T, codes ...int) *receiver {
	r := &receiver{t: t, codes: codes}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	block := r.block
	r.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-req.Context().Done():
			return
		}
	}
	if _, err := Verify([]byte(testSecret), req.Header.Get(SignatureHeader), body, time.Now(), 5*time.Minute); err != nil {
		r.t.Errorf("webhook: %v (body %s)", err, body)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tried++
	code := http.StatusOK
	if len(r.codes) > 0 {
		code, r.codes = r.codes[0], r.codes[1:]
	}
	if code/100 == 2 {
		var b WebhookBody
		if err := json.Unmarshal(body, &b); err != nil {
			r.t.Errorf("webhook body: %v", err)
		}
		r.got = append(r.got, b)
		r.raw = append(r.raw, string(body))
	}
	w.WriteHeader(code)
}

// ids returns the distinct delivery ids received.
func (r *receiver) ids() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]int{}
	for _, b := range r.got {
		m[b.DeliveryID]++
	}
	return m
}

// env is one test's streams on the shared NATS server.
type env struct {
	t   *testing.T
	cfg streams.Config
	nc  *nats.Conn
	js  jetstream.JetStream
	pub *streams.Publisher
}

func newEnv(t *testing.T) *env {
	name, prefix := testenv.SharedStreams(t)
	e := &env{t: t, cfg: streams.Config{Name: name, Prefix: prefix, Memory: true}}
	e.nc, e.js = connect(t)
	ctx := context.Background()
	if err := streams.EnsureStreams(ctx, e.js, e.cfg); err != nil {
		t.Fatal(err)
	}
	var err error
	if e.pub, err = streams.NewPublisher(e.nc, streams.PublisherOptions{Config: e.cfg}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.pub.Close)
	return e
}

func connect(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	nc, err := nats.Connect(testenv.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// publish publishes n lockout alerts of distinct accounts (acct-0...).
func (e *env) publish(n int, kind string) []string {
	e.t.Helper()
	var ids []string
	for i := range n {
		a := &streams.Alert{V: 1, ID: fmt.Sprintf("%s-%s-%d", e.cfg.Name, kind, i), TS: time.Now().UTC(), Kind: kind, Subject: "account",
			SubjectID: fmt.Sprintf("acct-%d", i), Rule: "account-failures", Multiplier: 1, Count: 10,
			ExpiresAt: time.Now().Add(15 * time.Minute).UTC(), Reason: "10 failed logins in 10m"}
		if err := e.pub.Alert(context.Background(), a); err != nil {
			e.t.Fatal(err)
		}
		ids = append(ids, a.ID)
	}
	return ids
}

// policyWith parses a policy whose alerting section is section.
func policyWith(t *testing.T, section string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("p.yaml", []byte("version: 1\nlimits: [{name: a, by: [ip], rate: 1/s}]\nalerting:\n"+section))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// start runs a Deliverer on js until the test ends or stop is called.
func (e *env) start(js jetstream.JetStream, p *policy.Policy, m *Metrics, tweak func(*Options)) (d *Deliverer, stop func() error) {
	o := Options{JetStream: js, Policy: func() *policy.Policy { return p }, Streams: e.cfg, Metrics: m,
		Getenv: func(k string) string {
			if k == "WEBHOOK_SECRET" {
				return testSecret
			}
			return ""
		},
		BackoffBase: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond}
	if tweak != nil {
		tweak(&o)
	}
	d, err := New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
		})
		return runErr
	}
	e.t.Cleanup(func() { _ = stop() })
	return d, stop
}

// waitFor polls cond until it holds or 20 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, func() string {
		if cond() {
			return ""
		}
		return "waiting for " + what
	})
}

// sinkConsumer is the consumer name of the i-th sink of p (Alertmanager
// first, then the webhooks).
func sinkConsumer(p *policy.Policy, i int) string {
	return consumerName(DefaultDurable, sinkRefs(p.Alerting)[i].key)
}

// consumerInfo is the consumer of the i-th sink of p.
func (e *env) consumerInfo(p *policy.Policy, i int) *jetstream.ConsumerInfo {
	e.t.Helper()
	c, err := e.js.Consumer(context.Background(), e.cfg.Stream(streams.EventsStream), sinkConsumer(p, i))
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return info
}

// ackPending is the unacknowledged count of every sink's consumer of p:
// the alerts taken and not acknowledged, and those not yet taken.
func (e *env) ackPending(p *policy.Policy) int {
	e.t.Helper()
	n := 0
	for i := range sinkRefs(p.Alerting) {
		info := e.consumerInfo(p, i)
		n += info.NumAckPending + int(info.NumPending)
	}
	return n
}

// TestReceiverOutageLosesNothing: a webhook that answers 503 to the first
// attempts (an outage) gets every alert once it answers 200, each with
// its delivery_id and a valid signature; the consumer holds each alert
// until then and has nothing left afterwards.
func TestReceiverOutageLosesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := newReceiver(t, 503, 503, 503, 503, 503, 503, 503, 503)
	p := policyWith(t, fmt.Sprintf("  webhooks: [{url: %q, secret_env: WEBHOOK_SECRET}]\n", r.srv.URL))
	m := NewMetrics(nil)
	d, stop := e.start(e.js, p, m, nil)
	ids := e.publish(5, streams.AlertLockout)
	waitFor(t, "every alert delivered", func() bool { return len(r.ids()) == 5 })
	got := r.ids()
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("delivery %s received %d times, want 1", id, got[id])
		}
	}
	waitFor(t, "every alert acknowledged", func() bool {
		return e.ackPending(p) == 0 && testutil.ToFloat64(m.Pending) == 0
	})
	// Acknowledged: every attempt is counted by now.
	if n := testutil.ToFloat64(m.Deliveries.WithLabelValues("webhooks[0]", ResultRetried)); n != 8 {
		t.Errorf("retried = %v, want 8 (the 503s)", n)
	}
	if n := testutil.ToFloat64(m.Deliveries.WithLabelValues("webhooks[0]", ResultDelivered)); n != 5 {
		t.Errorf("delivered = %v, want 5", n)
	}
	results := map[string]int{}
	for _, rec := range d.Recent() {
		results[rec.Result]++
		if rec.Result == ResultRetried && !strings.Contains(rec.Error, "503 Service Unavailable") {
			t.Errorf("recent: a retried attempt says %q", rec.Error)
		}
	}
	if results[ResultDelivered] != 5 || results[ResultRetried] != 8 || len(results) != 2 {
		t.Errorf("recent results: %v, want 5 delivered and 8 retried", results)
	}
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	// The body is the alert's JSON plus delivery_id; no folded when not folded.
	r.mu.Lock()
	raw := r.raw[0]
	r.mu.Unlock()
	for _, want := range []string{`"alert_id":`, `"kind":"lockout"`, `"subject":"account"`, `"expires_at":`, `"delivery_id":`} {
		if !strings.Contains(raw, want) {
			t.Errorf("body %s lacks %s", raw, want)
		}
	}
	if strings.Contains(raw, `"folded"`) {
		t.Errorf("unfolded body carries folded: %s", raw)
	}
}

// TestCrashMidDeliveryLosesNothing: a delivering process that dies
// (its NATS connection gone, nothing acknowledged or handed back) while
// its deliveries hang leaves every alert to the next process, which
// delivers them all.
func TestCrashMidDeliveryLosesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := newReceiver(t)
	r.block = make(chan struct{})
	p := policyWith(t, fmt.Sprintf("  webhooks: [{url: %q, secret_env: WEBHOOK_SECRET}]\n", r.srv.URL))
	ackWait := func(o *Options) { o.AckWait = time.Second }
	nc1, js1 := connect(t)
	m1 := NewMetrics(nil)
	_, stop1 := e.start(js1, p, m1, ackWait)
	ids := e.publish(4, streams.AlertAnomaly)
	waitFor(t, "the first process holding every alert", func() bool { return testutil.ToFloat64(m1.Pending) == 4 })
	nc1.Close() // the crash: no ack, no nak reaches the server
	_ = stop1() // it may end with its connection's error
	r.mu.Lock()
	r.block = nil
	r.mu.Unlock()
	_, _ = e.start(e.js, p, nil, ackWait)
	waitFor(t, "every alert delivered by the second process", func() bool { return len(r.ids()) == 4 })
	got := r.ids()
	for _, id := range ids {
		if got[id] < 1 {
			t.Errorf("delivery %s lost", id)
		}
	}
	waitFor(t, "every alert acknowledged", func() bool { return e.ackPending(p) == 0 })
}

// TestFoldAndFilters: repeats of one (kind, subject, id) within fold
// become one delivery with folded; another subject is its own; a shadow
// alert is not delivered without shadow: true; a webhook with kinds gets
// only those; a webhook given up after retry_for is counted failed and
// the alert still acknowledged.
func TestFoldAndFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := newReceiver(t)
	slack := newReceiver(t)
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) }))
	t.Cleanup(down.Close)
	p := policyWith(t, fmt.Sprintf(`  webhooks:
    - {url: %q, secret_env: WEBHOOK_SECRET}
    - {url: %q, secret_env: WEBHOOK_SECRET, format: slack, kinds: [lockout]}
    - {url: %q, kinds: [anomaly]}
  fold: 3s
  retry_for: 300ms
`, r.srv.URL, slack.srv.URL, down.URL))
	m := NewMetrics(nil)
	e.start(e.js, p, m, nil)
	ts := time.Now().UTC()
	pub := func(id, kind, subjectID string, shadow bool) {
		a := &streams.Alert{V: 1, ID: id, TS: ts, Kind: kind, Subject: "device", SubjectID: subjectID, Rule: "anomaly",
			Multiplier: 0.05, Rate: 5, Baseline: 0.05, ExpiresAt: ts.Add(15 * time.Minute), Reason: "device spike", Shadow: shadow}
		if err := e.pub.Alert(context.Background(), a); err != nil {
			t.Fatal(err)
		}
	}
	pub("a1", streams.AlertAnomaly, "d1", false)
	pub("a2", streams.AlertAnomaly, "d1", false)
	pub("a3", streams.AlertAnomaly, "d1", false)
	pub("s1", streams.AlertAnomaly, "d1", true)
	pub("b1", streams.AlertLockout, "d2", false)
	waitFor(t, "two deliveries", func() bool { return len(r.ids()) == 2 })
	waitFor(t, "everything acknowledged", func() bool { return e.ackPending(p) == 0 })
	r.mu.Lock()
	defer r.mu.Unlock()
	byID := map[string]WebhookBody{}
	for _, b := range r.got {
		byID[b.DeliveryID] = b
	}
	if b := byID["a1"]; b.Folded != 3 || b.ID != "a3" || b.Kind != "anomaly" {
		t.Errorf("folded delivery: %+v", b)
	}
	if b := byID["b1"]; b.Folded != 0 || b.ID != "b1" {
		t.Errorf("lone delivery: %+v", b)
	}
	if len(r.got) != 2 {
		t.Errorf("got %d deliveries, want 2 (the shadow alert is not delivered)", len(r.got))
	}
	slack.mu.Lock()
	defer slack.mu.Unlock()
	if len(slack.raw) != 1 || !strings.HasPrefix(slack.raw[0], `{"text":":rotating_light: *TollgateLockout* device `+"`d2`: `device spike`") {
		t.Errorf("slack got %q", slack.raw)
	}
	if n := testutil.ToFloat64(m.Deliveries.WithLabelValues("webhooks[2]", ResultFailed)); n != 1 {
		t.Errorf("webhooks[2] failed = %v, want 1 (given up after retry_for)", n)
	}
	if n := testutil.ToFloat64(m.Deliveries.WithLabelValues("webhooks[2]", ResultDelivered)); n != 0 {
		t.Errorf("webhooks[2] delivered = %v", n)
	}
}

// TestNotLeadingDeliversNothing: a deliverer whose Leading says no (its
// lease lapsed) makes no attempt and hands its alerts back; the leading
// one delivers them all.
func TestNotLeadingDeliversNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := newReceiver(t)
	p := policyWith(t, fmt.Sprintf("  webhooks: [{url: %q, secret_env: WEBHOOK_SECRET}]\n", r.srv.URL))
	follower := NewMetrics(nil)
	e.start(e.js, p, follower, func(o *Options) { o.Leading = func() bool { return false } })
	ids := e.publish(3, streams.AlertLockout)
	leader := NewMetrics(nil)
	e.start(e.js, p, leader, nil)
	waitFor(t, "every alert delivered by the leader", func() bool {
		return testutil.ToFloat64(leader.Deliveries.WithLabelValues("webhooks[0]", ResultDelivered)) == 3
	})
	if n := testutil.CollectAndCount(follower.Deliveries); n != 0 {
		t.Errorf("the follower counted %d attempt series, want none", n)
	}
	// The consumer sequence counts every delivery, redeliveries included.
	if info := e.consumerInfo(p, 0); info.Delivered.Consumer != uint64(len(ids)) {
		t.Errorf("consumer info %+v: want %d deliveries, each alert once (the follower takes none)", info, len(ids))
	}
	got := r.ids()
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("delivery %s received %d times, want 1", id, got[id])
		}
	}
}
