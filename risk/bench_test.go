package risk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/risk"
	"github.com/tollgate-dev/tollgate/streams"
)

const benchPolicy = `version: 1
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "* *", class: write}
limits:
  - {name: device, by: [device], rate: 600/min}
  - {name: ip, by: [ip], rate: 600/min}
risk:
  velocity:
    - {name: account-failures, event: login_failed, by: account, threshold: 10, window: 10m, action: lockout, duration: 15m}
  anomaly: {by: device, factor: 100, short_window: 10s, long_window: 10m, min_baseline: 0.05/s, multiplier: 0.05, duration: 15m}
  repeat_offender: {per_minute: 100}
`

// benchPublisher starts an embedded JetStream (file storage) for b and
// returns a publisher connected to it.
func benchPublisher(b *testing.B) *streams.Publisher {
	b.Helper()
	e, err := streams.StartEmbedded(b.TempDir(), 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.Stop)
	return replayPublisher(b, e.URL)
}

// BenchmarkDaemonDecisions measures how many decision events one riskd
// consumes and processes per second: b.N batches of 256 decisions (10,000
// devices, 20% denied) are published to an embedded JetStream first, then
// the daemon is started and timed until it has processed them all.
func BenchmarkDaemonDecisions(b *testing.B) {
	pub := benchPublisher(b)
	ctx := context.Background()
	cfg := streams.Config{Memory: true}
	if err := streams.EnsureStreams(ctx, pub.JetStream(), cfg); err != nil {
		b.Fatal(err)
	}
	p, err := policy.Parse("bench.yaml", []byte(benchPolicy))
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	const per = 256
	for i := 0; i < b.N; i++ {
		batch := streams.DecisionBatch{V: 1, Decisions: make([]streams.Decision, per)}
		for j := range batch.Decisions {
			k := (i*per + j) % 10000
			batch.Decisions[j] = streams.Decision{TS: now, RequestID: "01M8P6ZKNNK0QBD6RW7G32XJ6J", Endpoint: "POST /x", Class: "write",
				Limit: "device", Allowed: k%5 != 0, Result: map[bool]string{true: "allowed", false: "limited"}[k%5 != 0],
				IP: fmt.Sprintf("10.0.%d.%d", k/256, k%256), DeviceID: fmt.Sprintf("d%d", k)}
		}
		data, _ := json.Marshal(batch)
		if _, err := pub.JetStream().Publish(ctx, "tollgate.decisions.write", data); err != nil {
			b.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	m := risk.NewMetrics(reg)
	d, err := risk.New(risk.Options{Publisher: pub, Store: bucket.NewMemoryStore(bucket.MemoryOptions{}),
		Policy: func() *policy.Policy { return p }, Streams: cfg, Metrics: m})
	if err != nil {
		b.Fatal(err)
	}
	want := float64(b.N * per)
	b.ResetTimer()
	start := time.Now()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = d.Run(rctx); close(done) }()
	for testutil.ToFloat64(m.Events.WithLabelValues("decision")) < want {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	<-done
	b.ReportMetric(want/elapsed.Seconds(), "events/s")
}

// lockoutPolicy locks an account at its first failed login, so that
// every report is a lockout: a lock written and an alert published.
const lockoutPolicy = `version: 1
limits:
  - {name: ip, by: [ip], rate: 600/min}
risk:
  velocity:
    - {name: first-failure, event: login_failed, by: account, threshold: 1, window: 10m, action: lockout, duration: 15m}
`

// BenchmarkDaemonLockouts measures how many lockouts one riskd makes per
// second when every event is one (a credential-stuffing run across many
// accounts): b.N login_failed reports of distinct accounts are published
// first, then the daemon is timed until it has published their b.N alerts.
// Each lockout writes its lock, publishes its alert and has JetStream
// confirm both the alert and the report's acknowledgement. "embedded" runs
// on the one-process default's embedded JetStream (file storage);
// "cluster" on a three-node nats-server cluster with every stream and
// consumer replicated three times, where each confirmation waits for a
// quorum (docs/scaling.md's deployment).
func BenchmarkDaemonLockouts(b *testing.B) {
	b.Run("embedded", func(b *testing.B) { benchLockouts(b, benchPublisher(b), streams.Config{}) })
	b.Run("cluster", func(b *testing.B) {
		c := testenv.StartNATSCluster(b, 3)
		benchLockouts(b, replayPublisher(b, c.URLs()), streams.Config{Replicas: 3})
	})
}

// benchLockouts runs BenchmarkDaemonLockouts on pub's JetStream, its
// streams and consumers made by cfg.
func benchLockouts(b *testing.B, pub *streams.Publisher, cfg streams.Config) {
	ctx := context.Background()
	if err := streams.EnsureStreams(ctx, pub.JetStream(), cfg); err != nil {
		b.Fatal(err)
	}
	p, err := policy.Parse("bench.yaml", []byte(lockoutPolicy))
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC()
	for i := 0; i < b.N; i++ {
		r := streams.Report{V: 1, ID: fmt.Sprint("r", i), TS: now, Type: streams.ReportLoginFailed, Source: "api", Account: fmt.Sprintf("user%d@example.com", i)}
		if err := pub.Report(ctx, &r); err != nil {
			b.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	m := risk.NewMetrics(reg)
	d, err := risk.New(risk.Options{Publisher: pub, Store: bucket.NewMemoryStore(bucket.MemoryOptions{}),
		Policy: func() *policy.Policy { return p }, Streams: cfg, Metrics: m})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = d.Run(rctx); close(done) }()
	for testutil.ToFloat64(m.Alerts.WithLabelValues(streams.AlertLockout)) < float64(b.N) {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	<-done
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "lockouts/s")
}

// BenchmarkDaemonStartTrustJournal measures what riskd's trust journal
// adds to its start: a daemon started on an embedded JetStream whose
// journal holds 100,000 enrolments (sub-benchmark journal) or none
// (empty), until it is ready; each iteration starts a new daemon (its own
// trust record) and stops it.
func BenchmarkDaemonStartTrustJournal(b *testing.B) {
	for _, n := range []int{0, 100_000} {
		name := "empty"
		if n > 0 {
			name = "journal"
		}
		b.Run(name, func(b *testing.B) {
			pub := benchPublisher(b)
			ctx := context.Background()
			if err := streams.EnsureStreams(ctx, pub.JetStream(), streams.Config{}); err != nil {
				b.Fatal(err)
			}
			now := time.Now().UTC()
			for i := range n {
				e := streams.TrustEnrolment{V: 1, Account: fmt.Sprintf("user%d@example.com", i), Device: fmt.Sprint("device-", i),
					At: now.Add(-time.Hour), Until: now.Add(29 * 24 * time.Hour)}
				if _, err := pub.TrustAsync(&e); err != nil {
					b.Fatal(err)
				}
			}
			select {
			case <-pub.JetStream().PublishAsyncComplete():
			case <-time.After(time.Minute):
				b.Fatal("journal not written within a minute")
			}
			p, err := policy.Parse("bench.yaml", []byte(lockoutPolicy))
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				d, err := risk.New(risk.Options{Publisher: pub, Store: bucket.NewMemoryStore(bucket.MemoryOptions{MaxSubjects: 2 * n}),
					Policy: func() *policy.Policy { return p }})
				if err != nil {
					b.Fatal(err)
				}
				rctx, cancel := context.WithCancel(ctx)
				done := make(chan struct{})
				go func() { _ = d.Run(rctx); close(done) }()
				select {
				case <-d.Ready():
				case <-time.After(2 * time.Minute):
					b.Fatal("not ready within 2 minutes")
				}
				cancel()
				<-done
			}
		})
	}
}
