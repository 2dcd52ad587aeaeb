package risk_test

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync/atomic"
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

// replayEvents is how many failed logins TestReplayOutlastsFailedFetches
// replays: three fetches of at most 500 (risk's replay batch).
const replayEvents = 1199

// TestReplayOutlastsFailedFetches (7.5): a riskd that restarts rebuilds its
// state completely, though fetches of its replay fail or come back empty:
// 1199 failed logins of one account are processed by a first daemon; a
// second one, connected through a testenv.NATSProxy, replays them, and
//   - its 2nd pull request is answered "409 Consumer Deleted" (what
//     nats-server answers a pull whose consumer went away, such as the
//     memory-stored ordered consumer of a replay after a server restart;
//     a single server cannot be made to on cue): a failed fetch
//     (batch.Error), to be logged, counted and retried;
//   - the server's answer to its 4th pull, the last 199 events, is held
//     1.5 s, longer than a fetch waits (1 s): an empty fetch, while the
//     server has delivered the rest (its consumer has none pending), to
//     a subscription the client has closed.
//
// The 1200th failure then locks the account, where a replay that took
// either fetch for the end would have counted 500 or 1000 events.
func TestReplayOutlastsFailedFetches(t *testing.T) {
	t.Parallel()
	ns := testenv.StartNATS(t)
	px := testenv.StartNATSProxy(t, ns.URL)
	pub := replayPublisher(t, ns.URL)
	ctx := context.Background()
	if err := streams.EnsureStreams(ctx, pub.JetStream(), streams.Config{}); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse("p.yaml", []byte(strings.Replace(filterPolicy, "threshold: 2", fmt.Sprintf("threshold: %d", replayEvents+1), 1)))
	if err != nil {
		t.Fatal(err)
	}
	store := bucket.NewMemoryStore(bucket.MemoryOptions{})
	report := func(i int) {
		t.Helper()
		r := streams.Report{V: 1, ID: fmt.Sprintf("r%d", i), TS: time.Now().UTC(), Type: streams.ReportLoginFailed, Source: "api", Account: "mallory"}
		if err := pub.Report(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	m1, stop1 := runReplayDaemon(t, pub, store, p, slog.New(slog.DiscardHandler))
	for i := 0; i < replayEvents; i++ {
		report(i)
	}
	testenv.Eventually(t, 10*time.Second, func() string {
		if n := testutil.ToFloat64(m1.Events.WithLabelValues("report")); n != replayEvents {
			return fmt.Sprintf("first daemon processed %v of %d reports", n, replayEvents)
		}
		return ""
	})
	stop1()

	var pulls atomic.Int32
	stream := streams.Config{}.Stream(streams.EventsStream)
	px.OnPublish("$JS.API.CONSUMER.MSG.NEXT."+stream+".", func(string) string {
		switch pulls.Add(1) {
		case 2:
			return "409 Consumer Deleted"
		case 4:
			px.HoldReplies(1500 * time.Millisecond)
		}
		return ""
	})
	var logs testenv.SyncBuffer
	m2, stop2 := runReplayDaemon(t, replayPublisher(t, px.URL), store, p, slog.New(slog.NewTextHandler(&logs, nil)))
	defer stop2()
	if !regexp.MustCompile(`msg="replay fetch failed; retrying.*consumer deleted`).MatchString(logs.String()) {
		t.Errorf("the failed fetch was not logged:\n%s", logs.String())
	}
	if n := testutil.ToFloat64(m2.Errors.WithLabelValues("replay")); n != 1 {
		t.Errorf("errors_total{op=replay} = %v, want 1 (the one failed fetch)", n)
	}
	if !strings.Contains(logs.String(), fmt.Sprintf("messages=%d", replayEvents)) {
		t.Errorf("the replay did not read all %d events:\n%s", replayEvents, logs.String())
	}
	if n := pulls.Load(); n < 5 {
		t.Errorf("the replay and trust reader pulled %d times, fewer than the 5 of the replay the test means", n)
	}
	lock := bucket.Subject{Kind: "account", ID: "mallory"}
	if _, ok, _ := store.GetLock(ctx, lock); ok {
		t.Fatal("locked before the last failure")
	}
	report(replayEvents)
	testenv.Eventually(t, 20*time.Second, func() string {
		if _, ok, _ := store.GetLock(ctx, lock); !ok {
			return "not locked after the last failure: the replay lost events"
		}
		return ""
	})
}

// replayPublisher is a publisher on its own connection to url, closed at
// cleanup.
func replayPublisher(t testing.TB, url string) *streams.Publisher {
	t.Helper()
	nc, err := streams.Connect(url, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	pub, err := streams.NewPublisher(nc, streams.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pub.Close)
	return pub
}

// runReplayDaemon starts a daemon with policy p on pub and store, and
// returns once it is ready (it has rebuilt its state).
func runReplayDaemon(t *testing.T, pub *streams.Publisher, store risk.Writer, p *policy.Policy, log *slog.Logger) (m *risk.Metrics, stop func()) {
	t.Helper()
	m = risk.NewMetrics(prometheus.NewRegistry())
	d, err := risk.New(risk.Options{Publisher: pub, Store: store, Metrics: m, Logger: log,
		Policy: func() *policy.Policy { return p }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("daemon stopped before ready: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("daemon not ready")
	}
	return m, stop
}
