package risk_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/risk"
	"github.com/tollgate-dev/tollgate/streams"
)

const filterPolicy = `version: 1
limits:
  - {name: ip, by: [ip], rate: 600/min}
risk:
  velocity:
    - {name: account-failures, event: login_failed, by: account, threshold: 2, window: 10m, action: lockout, duration: 15m}
`

// daemonEnv is a riskd daemon on a private nats-server (the one the test
// command installs: Debian's 2.9) with a memory store.
type daemonEnv struct {
	nats    *testenv.NATSServer
	pub     *streams.Publisher
	store   *bucket.MemoryStore
	metrics *risk.Metrics
	d       *risk.Daemon
	done    chan error
	cancel  context.CancelFunc
}

func startDaemon(t *testing.T, before func(js jetstream.JetStream)) *daemonEnv {
	t.Helper()
	e := &daemonEnv{nats: testenv.StartNATS(t), store: bucket.NewMemoryStore(bucket.MemoryOptions{})}
	nc, err := streams.Connect(e.nats.URL, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	t.Logf("nats-server %s (the test command installs Debian's 2.9)", nc.ConnectedServerVersion())
	e.pub, err = streams.NewPublisher(nc, streams.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.pub.Close)
	ctx := context.Background()
	if err := streams.EnsureStreams(ctx, e.pub.JetStream(), streams.Config{}); err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(e.pub.JetStream())
	}
	p, err := policy.Parse("p.yaml", []byte(filterPolicy))
	if err != nil {
		t.Fatal(err)
	}
	e.metrics = risk.NewMetrics(prometheus.NewRegistry())
	e.d, err = risk.New(risk.Options{Publisher: e.pub, Store: e.store, Policy: func() *policy.Policy { return p }, Metrics: e.metrics, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	e.cancel, e.done = cancel, make(chan error, 1)
	go func() { e.done <- e.d.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		select { // a daemon that ignores its context fails the test, not hangs it
		case <-e.done:
		case <-time.After(10 * time.Second):
			t.Error("daemon did not stop within 10s of its context's end")
		}
	})
	select {
	case <-e.d.Ready():
	case err := <-e.done:
		t.Fatalf("daemon stopped before ready: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("daemon not ready")
	}
	return e
}

// waitFor polls f until it holds (testenv.Eventually).
func waitFor(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	testenv.Eventually(t, d, func() string {
		if f() {
			return ""
		}
		return what
	})
}

// TestConsumersFilterOnNATS29 (6.7): on nats-server 2.9 each durable
// consumer gets exactly its subjects: 10 reports that fire 5 lockouts
// (and 5 alerts on the same stream), then one more, count 11 report
// events, none of another subject; a leftover unfiltered durable of an older riskd is
// recreated with its filter; every consumer it made has a FilterSubject.
func TestConsumersFilterOnNATS29(t *testing.T) {
	t.Parallel()
	e := startDaemon(t, func(js jetstream.JetStream) {
		// what riskd left behind on 2.9 before: an unfiltered durable
		_, err := js.CreateOrUpdateConsumer(context.Background(), "TOLLGATE_EVENTS", jetstream.ConsumerConfig{
			Durable: "riskd-reports", AckPolicy: jetstream.AckExplicitPolicy})
		if err != nil {
			t.Fatal(err)
		}
	})
	ctx := context.Background()
	for _, name := range []string{"riskd-reports", "riskd-decisions"} {
		stream := "TOLLGATE_EVENTS"
		want := "tollgate.reports.>"
		if name == "riskd-decisions" {
			stream, want = "TOLLGATE_DECISIONS", "tollgate.decisions.>"
		}
		c, err := e.pub.JetStream().Consumer(ctx, stream, name)
		if err != nil {
			t.Fatal(err)
		}
		if cfg := c.CachedInfo().Config; cfg.FilterSubject != want {
			t.Fatalf("%s filter %q %v, want %q", name, cfg.FilterSubject, cfg.FilterSubjects, want)
		}
	}
	for i := 0; i < 10; i++ {
		r := streams.Report{V: 1, ID: "r" + string(rune('a'+i)), TS: time.Now().UTC(), Type: streams.ReportLoginFailed,
			Source: "api", Account: "acct" + string(rune('a'+i/2))}
		if err := e.pub.Report(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "5 lockout alerts", func() bool {
		return testutil.ToFloat64(e.metrics.Alerts.WithLabelValues("lockout")) == 5
	})
	// one more report, stored after the alerts: the consumer delivers in
	// stream order, so once it is processed a wrongly delivered alert
	// would have been counted
	r := streams.Report{V: 1, ID: "marker", TS: time.Now().UTC(), Type: streams.ReportLoginFailed, Source: "api", Account: "marker"}
	if err := e.pub.Report(ctx, &r); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the report stored after the alerts processed", func() bool {
		return testutil.ToFloat64(e.metrics.Events.WithLabelValues("report")) >= 11
	})
	if n := testutil.ToFloat64(e.metrics.Events.WithLabelValues("report")); n != 11 {
		t.Fatalf("events_total{type=report} = %v, want 11", n)
	}
	if n := testutil.ToFloat64(e.metrics.Errors.WithLabelValues("subject")); n != 0 {
		t.Fatalf("%v messages of subjects riskd did not ask for", n)
	}
	if n := testutil.ToFloat64(e.metrics.Events.WithLabelValues("decision")); n != 0 {
		t.Fatalf("events_total{type=decision} = %v, want 0", n)
	}
	// Every consumer the daemon made (durables, the audit tail, what is
	// left of its replays and trust reader) has its one filter: 2.9 drops
	// FilterSubjects, which would leave a consumer of the whole stream.
	seen := 0
	for _, stream := range []string{"TOLLGATE_DECISIONS", "TOLLGATE_EVENTS", "TOLLGATE_AUDIT"} {
		st, err := e.pub.JetStream().Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		l := st.ListConsumers(ctx)
		for info := range l.Info() {
			seen++
			if info.Config.FilterSubject == "" {
				t.Errorf("consumer %s of %s has no filter (FilterSubjects %v)", info.Name, stream, info.Config.FilterSubjects)
			}
		}
		if err := l.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if seen < 3 {
		t.Fatalf("listed %d consumers, want at least the 2 durables and the audit tail", seen)
	}
}

// TestConsumerDeletedStopsDaemon (6.7): when a consumer is deleted under
// a running daemon, Run returns its error instead of running half-deaf.
func TestConsumerDeletedStopsDaemon(t *testing.T) {
	t.Parallel()
	e := startDaemon(t, nil)
	if err := e.pub.JetStream().DeleteConsumer(context.Background(), "TOLLGATE_EVENTS", "riskd-reports"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-e.done:
		if err == nil || !strings.Contains(err.Error(), "riskd-reports") {
			t.Fatalf("Run returned %v, want the reports consumer's error", err)
		}
		e.done <- err // for the cleanup
	case <-time.After(15 * time.Second):
		t.Fatal("daemon kept running without its reports consumer")
	}
}

// TestAuditLiftAndAdminRecord: the daemon applies audit events: a lifted
// lock is cleared and never re-asserted, and an admin multiplier lost by
// the store is written again when StoreLost says so.
func TestAuditLiftAndAdminRecord(t *testing.T) {
	t.Parallel()
	e := startDaemon(t, nil)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		r := streams.Report{V: 1, ID: "f" + string(rune('0'+i)), TS: time.Now().UTC(), Type: streams.ReportLoginFailed, Source: "api", Account: "dave"}
		if err := e.pub.Report(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	lock := bucket.Subject{Kind: "account", ID: "dave"}
	waitFor(t, 5*time.Second, "dave locked", func() bool { _, ok, _ := e.store.GetLock(ctx, lock); return ok })
	v := 0.25
	for _, a := range []streams.Audit{
		{V: 1, AuditID: "a1", TS: time.Now().UTC(), Action: streams.AuditLockoutLift, Subject: "account", ID: "dave"},
		{V: 1, AuditID: "a2", TS: time.Now().UTC(), Action: streams.AuditMultiplierSet, Subject: "ip", ID: "192.0.2.7", Value: &v},
	} {
		if err := e.pub.Audit(ctx, &a); err != nil {
			t.Fatal(err)
		}
	}
	mk := bucket.Subject{Kind: "ip", ID: "192.0.2.7"}
	waitFor(t, 5*time.Second, "lift and multiplier applied", func() bool {
		_, locked, _ := e.store.GetLock(ctx, lock)
		ms, _ := e.store.Multipliers(ctx, mk)
		return !locked && len(ms) == 1 && ms[0].Value == 0.25
	})
}
