package risk_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/risk"
	"github.com/tollgate-dev/tollgate/streams"
)

// TestReplayCoversMeasuresInForce: a riskd that restarts replays far
// enough back to see the events that set every measure still in force,
// however much longer than its rule's window the measure lasts, and
// re-asserts it into a store that lost it. The restart is a second
// daemon whose clock (Options.Now) is shifted to a time the measure is
// still in force, past its rule's window: an anomaly multiplier of 15m
// (long window 11m) 12 minutes on, a velocity block of 3h (window 10m)
// 2 hours on.
func TestReplayCoversMeasuresInForce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, policy string
		shift        time.Duration
		subject      bucket.Subject
		feed         func(t *testing.T, pub *streams.Publisher)
	}{
		{
			name: "anomaly",
			policy: `version: 1
limits:
  - {name: ip, by: [ip], rate: 600/min}
risk:
  anomaly: {by: ip, factor: 100, short_window: 10s, long_window: 11m, min_baseline: 0.05/s, multiplier: 0.05, duration: 15m}
`,
			shift:   12 * time.Minute,
			subject: bucket.Subject{Kind: "ip", ID: "192.0.2.9"},
			feed: func(t *testing.T, pub *streams.Publisher) {
				for i := 0; i < 200; i++ {
					pub.Decision(&streams.Decision{TS: time.Now().UTC(), RequestID: fmt.Sprint("d", i), Endpoint: "GET /", Class: "read",
						Limit: "ip", Allowed: true, Result: "allowed", IP: "192.0.2.9"})
				}
			},
		},
		{
			name: "velocity",
			policy: `version: 1
limits:
  - {name: ip, by: [ip], rate: 600/min}
risk:
  velocity:
    - {name: ip-spray, event: login_failed, by: ip, threshold: 3, window: 10m, action: block, duration: 3h}
`,
			shift:   2 * time.Hour,
			subject: bucket.Subject{Kind: "ip", ID: "192.0.2.7"},
			feed: func(t *testing.T, pub *streams.Publisher) {
				for i := 0; i < 3; i++ {
					r := streams.Report{V: 1, ID: fmt.Sprint("f", i), TS: time.Now().UTC(), Type: streams.ReportLoginFailed, Source: "api",
						Account: fmt.Sprint("victim", i), IP: "192.0.2.7"}
					if err := pub.Report(context.Background(), &r); err != nil {
						t.Fatal(err)
					}
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := testenv.StartNATS(t)
			pub := replayPublisher(t, ns.URL)
			ctx := context.Background()
			if err := streams.EnsureStreams(ctx, pub.JetStream(), streams.Config{}); err != nil {
				t.Fatal(err)
			}
			p, err := policy.Parse("p.yaml", []byte(tc.policy))
			if err != nil {
				t.Fatal(err)
			}
			inForce := func(store *bucket.MemoryStore) string {
				ms, err := store.Multipliers(ctx, tc.subject)
				if err != nil {
					return err.Error()
				}
				for _, m := range ms {
					if m.Source != "admin" && m.Value < 1 {
						return ""
					}
				}
				return fmt.Sprintf("no measure on %v: %+v", tc.subject, ms)
			}
			first := bucket.NewMemoryStore(bucket.MemoryOptions{})
			_, stop1 := runReplayDaemon(t, pub, first, p, slog.New(slog.DiscardHandler))
			tc.feed(t, pub)
			testenv.Eventually(t, 10*time.Second, func() string { return inForce(first) })
			stop1()

			// the restart, later, on a store that lost everything
			second := bucket.NewMemoryStore(bucket.MemoryOptions{})
			d, err := risk.New(risk.Options{Publisher: replayPublisher(t, ns.URL), Store: second, Metrics: risk.NewMetrics(prometheus.NewRegistry()),
				Logger: slog.New(slog.DiscardHandler), Policy: func() *policy.Policy { return p }, Reassert: time.Second,
				Now: func() time.Time { return time.Now().Add(tc.shift) }})
			if err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- d.Run(rctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
			testenv.Eventually(t, 15*time.Second, func() string { return inForce(second) })
		})
	}
}
