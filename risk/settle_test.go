package risk_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/streams"
)

// TestUnstoredAlertHoldsItsMessage (7.5): riskd sends a lockout's alert
// without waiting and settles the message later; while the alert cannot
// be stored (the events stream takes no alerts subject), the lock is
// written, the alert is published again and again, and neither its
// message nor one behind it is acknowledged: the consumer's ack floor
// stays on the last event whose actions all took effect. Once the stream
// takes alerts again, the alert is stored once and both messages are
// acknowledged.
func TestUnstoredAlertHoldsItsMessage(t *testing.T) {
	t.Parallel()
	e := startDaemon(t, nil)
	ctx := context.Background()
	js := e.pub.JetStream()
	cfg := streams.Config{}
	st, err := js.Stream(ctx, cfg.Stream(streams.EventsStream))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	full := info.Config
	noAlerts := full
	noAlerts.Subjects = slices.DeleteFunc(slices.Clone(full.Subjects), func(s string) bool { return strings.Contains(s, ".alerts.") })
	if len(noAlerts.Subjects) == len(full.Subjects) {
		t.Fatalf("no alerts subject in %v", full.Subjects)
	}
	if _, err := js.UpdateStream(ctx, noAlerts); err != nil {
		t.Fatal(err)
	}
	n := 0
	fail := func(account string) {
		t.Helper()
		n++
		r := streams.Report{V: 1, ID: fmt.Sprint("r", n), TS: time.Now().UTC(), Type: streams.ReportLoginFailed, Source: "api", Account: account}
		if err := e.pub.Report(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	fail("gina")
	fail("gina") // the lockout: its lock and its alert
	fail("hank") // behind it, no action of its own
	waitFor(t, 10*time.Second, "gina not locked", func() bool {
		_, ok, _ := e.store.GetLock(ctx, bucket.Subject{Kind: "account", ID: "gina"})
		return ok
	})
	errs := e.metrics.Errors.WithLabelValues("alert")
	waitFor(t, 10*time.Second, "the alert not published again", func() bool { return testutil.ToFloat64(errs) >= 3 })
	cons, err := js.Consumer(ctx, cfg.Stream(streams.EventsStream), "riskd-reports")
	if err != nil {
		t.Fatal(err)
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ci.NumAckPending != 2 || ci.AckFloor.Stream != 1 {
		t.Fatalf("with the alert unstored: %d acks pending, ack floor %d; want 2 (gina's second failure, hank's), 1 (gina's first)",
			ci.NumAckPending, ci.AckFloor.Stream)
	}
	if got := testutil.ToFloat64(e.metrics.Alerts.WithLabelValues(streams.AlertLockout)); got != 0 {
		t.Fatalf("%v lockout alerts counted as stored, want 0", got)
	}

	if _, err := js.UpdateStream(ctx, full); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "both messages not acknowledged after the stream took alerts again", func() bool {
		ci, err := cons.Info(ctx)
		return err == nil && ci.NumAckPending == 0 && ci.AckFloor.Stream >= 3
	})
	si, err := st.Info(ctx, jetstream.WithSubjectFilter(streams.DefaultPrefix+"alerts.>"))
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(e.metrics.Alerts.WithLabelValues(streams.AlertLockout)); got != 1 || len(si.State.Subjects) != 1 {
		t.Fatalf("%v lockout alerts counted, alerts stored by subject %v; want 1, one", got, si.State.Subjects)
	}
	for subj, c := range si.State.Subjects {
		if c != 1 {
			t.Fatalf("%s stored %d times, want once", subj, c)
		}
	}
}
