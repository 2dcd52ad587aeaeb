package risk_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"syscall"
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

// TestReplayOutlastsStalledNATS (7.5): a riskd that restarts rebuilds its
// state completely even when NATS goes away in the middle of the replay:
// 599 failed logins of one account are processed by a first daemon; a
// second one replays them, and the nats-server is paused (SIGSTOP) for
// 2.5 s while it does. The fetches that fail or find nothing are retried,
// never taken for the end (nor an empty one: the end is the floor, or the
// stream's last sequence at the start): the 600th failure locks the
// account, where a replay that stopped early would have counted fewer.
func TestReplayOutlastsStalledNATS(t *testing.T) {
	t.Parallel()
	ns := testenv.StartNATS(t)
	nc, err := streams.Connect(ns.URL, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	pub, err := streams.NewPublisher(nc, streams.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pub.Close)
	ctx := context.Background()
	if err := streams.EnsureStreams(ctx, pub.JetStream(), streams.Config{}); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse("p.yaml", []byte(strings.Replace(filterPolicy, "threshold: 2", "threshold: 600", 1)))
	if err != nil {
		t.Fatal(err)
	}
	store := bucket.NewMemoryStore(bucket.MemoryOptions{})
	// run starts a daemon whose policy func calls hook on every call; its
	// ready waits until it consumes
	run := func(hook func(n int64)) (m *risk.Metrics, ready, stop func()) {
		t.Helper()
		var calls atomic.Int64
		m = risk.NewMetrics(prometheus.NewRegistry())
		d, err := risk.New(risk.Options{Publisher: pub, Store: store, Metrics: m, Logger: slog.New(slog.DiscardHandler),
			Policy: func() *policy.Policy { hook(calls.Add(1)); return p }})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- d.Run(rctx) }()
		stop = func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
		ready = func() {
			t.Helper()
			select {
			case <-d.Ready():
			case err := <-done:
				done <- err // for stop
				t.Fatalf("daemon stopped before ready: %v", err)
			case <-time.After(30 * time.Second):
				t.Fatal("daemon not ready")
			}
		}
		return m, ready, stop
	}
	report := func(i int) {
		t.Helper()
		r := streams.Report{V: 1, ID: fmt.Sprintf("r%d", i), TS: time.Now().UTC(), Type: streams.ReportLoginFailed, Source: "api", Account: "mallory"}
		if err := pub.Report(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	m1, ready1, stop1 := run(func(int64) {})
	ready1()
	for i := 0; i < 599; i++ {
		report(i)
	}
	testenv.Eventually(t, 10*time.Second, func() string {
		if n := testutil.ToFloat64(m1.Events.WithLabelValues("report")); n != 599 {
			return fmt.Sprintf("first daemon processed %v of 599 reports", n)
		}
		return ""
	})
	stop1()

	t.Cleanup(func() { _ = ns.Cmd.Process.Signal(syscall.SIGCONT) })
	killed := make(chan struct{})
	var once atomic.Bool
	_, ready2, stop2 := run(func(n int64) {
		// the 502nd call is the replay's 500th message, the last of its first
		// fetch (New and sources ask first): the next fetch meets the stall
		if n == 502 && once.CompareAndSwap(false, true) {
			_ = ns.Cmd.Process.Signal(syscall.SIGSTOP) // not t's goroutine: ns.Pause would fail t here
			close(killed)
		}
	})
	defer stop2()
	select {
	case <-killed:
	case <-time.After(30 * time.Second):
		t.Fatal("the second daemon did not replay")
	}
	time.Sleep(2500 * time.Millisecond) // a stall, not a wait for a negative
	ns.Resume(t)
	ready2()
	lock := bucket.Subject{Kind: "account", ID: "mallory"}
	if _, ok, _ := store.GetLock(ctx, lock); ok {
		t.Fatal("locked before the 600th failure")
	}
	report(599)
	testenv.Eventually(t, 20*time.Second, func() string {
		if _, ok, _ := store.GetLock(ctx, lock); !ok {
			return "not locked after the 600th failure: the replay lost events"
		}
		return ""
	})
}
