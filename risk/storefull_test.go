package risk_test

import (
	"context"
	"log/slog"
	"strconv"
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

// TestFullMemoryStoreDoesNotStallRiskd: the one-process memory store
// holds a bounded number of locks (MaxSubjects) and refuses a new one when
// full (bucket.ErrFull) rather than evict a lock in force. riskd retried a
// refused write for ever, and held every later event behind it: an
// attacker who filled the table with lockouts of accounts of its own
// stopped riskd acting on anything until a lock expired (15 minutes with
// the example policy). A refused write is now counted
// (tollgate_riskd_errors_total{op="store_full"}) and logged, and riskd
// goes on: here 8 lockouts on a table of 4 give 8 alerts, 4 writes refused.
func TestFullMemoryStoreDoesNotStallRiskd(t *testing.T) {
	t.Parallel()
	pub := replayPublisher(t, testenv.StartNATS(t).URL)
	ctx := context.Background()
	if err := streams.EnsureStreams(ctx, pub.JetStream(), streams.Config{}); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse("p.yaml", []byte(filterPolicy))
	if err != nil {
		t.Fatal(err)
	}
	const table, lockouts = 4, 8
	store := bucket.NewMemoryStore(bucket.MemoryOptions{MaxSubjects: table})
	m := risk.NewMetrics(prometheus.NewRegistry())
	d, err := risk.New(risk.Options{Publisher: pub, Store: store, Policy: func() *policy.Policy { return p }, Metrics: m, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runReady(t, ctx, d)
	for i := range 2 * lockouts { // threshold 2: a lockout per account
		r := streams.Report{V: 1, ID: "r" + strconv.Itoa(i), TS: time.Now().UTC(), Type: streams.ReportLoginFailed,
			Source: "api", Account: "acct" + strconv.Itoa(i/2)}
		if err := pub.Report(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, strconv.Itoa(lockouts)+" lockout alerts: riskd stalled on the full store", func() bool {
		return testutil.ToFloat64(m.Alerts.WithLabelValues("lockout")) == lockouts
	})
	if n := testutil.ToFloat64(m.Errors.WithLabelValues("store_full")); n != lockouts-table {
		t.Fatalf("errors_total{op=store_full} = %v, want %d", n, lockouts-table)
	}
	// the locks written are in force; none was evicted for the others
	for i := range table {
		if _, ok, err := store.GetLock(ctx, bucket.Subject{Kind: "account", ID: "acct" + strconv.Itoa(i)}); err != nil || !ok {
			t.Fatalf("acct%d: lock %v %v", i, ok, err)
		}
	}
}

// runReady runs d under ctx until the test's cleanup, and returns once it
// is ready.
func runReady(t *testing.T, ctx context.Context, d *risk.Daemon) {
	t.Helper()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("daemon stopped before ready: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("daemon not ready")
	}
}
