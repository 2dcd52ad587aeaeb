package risk_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// TestClockAheadSweepsNoCount: a report from a limiter whose clock runs
// an hour ahead moves the daemon's engine clock no further than its
// JetStream message's time (plus signals.MaxClockSkew): the account's
// nine failures are not swept as idle, and the tenth locks it.
func TestClockAheadSweepsNoCount(t *testing.T) {
	t.Parallel()
	ns := testenv.StartNATS(t)
	pub := replayPublisher(t, ns.URL)
	ctx := context.Background()
	if err := streams.EnsureStreams(ctx, pub.JetStream(), streams.Config{}); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse("p.yaml", []byte(strings.Replace(filterPolicy, "threshold: 2", "threshold: 10", 1)))
	if err != nil {
		t.Fatal(err)
	}
	store := bucket.NewMemoryStore(bucket.MemoryOptions{})
	_, stop := runReplayDaemon(t, pub, store, p, slog.New(slog.DiscardHandler))
	defer stop()
	n := 0
	report := func(account string, ts time.Time) {
		t.Helper()
		n++
		r := streams.Report{V: 1, ID: fmt.Sprint("r", n), TS: ts.UTC(), Type: streams.ReportLoginFailed, Source: "api", Account: account}
		if err := pub.Report(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 9; i++ {
		report("alice", time.Now())
	}
	report("bob", time.Now().Add(time.Hour)) // the fast host
	for i := 0; i < 20; i++ {
		report(fmt.Sprint("carol", i), time.Now())
	}
	report("alice", time.Now())
	testenv.Eventually(t, 10*time.Second, func() string {
		if _, ok, _ := store.GetLock(ctx, bucket.Subject{Kind: "account", ID: "alice"}); !ok {
			return "alice not locked after her 10th failure"
		}
		return ""
	})
}
