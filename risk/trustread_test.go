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

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// TestTrustRecordOutlastsFailedFetch (7.5): the trusted-device record a
// starting riskd rebuilds from the events stream is complete though a
// pull fails: its 2nd pull is answered "409 Consumer Deleted" (as in
// TestReplayOutlastsFailedFetches), which is logged, counted and retried,
// not taken for the end of the stream (which would leave the devices
// after the first 500 out of every re-assertion into a Redis that lost
// them).
func TestTrustRecordOutlastsFailedFetch(t *testing.T) {
	t.Parallel()
	const enrolments = 700 // two pulls of at most 500
	ns := testenv.StartNATS(t)
	px := testenv.StartNATSProxy(t, ns.URL)
	pub := replayPublisher(t, ns.URL)
	ctx := context.Background()
	if err := streams.EnsureStreams(ctx, pub.JetStream(), streams.Config{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < enrolments; i++ {
		r := streams.Report{V: 1, ID: fmt.Sprintf("s%d", i), TS: time.Now().UTC(), Type: streams.ReportLoginSucceeded, Source: "api",
			Account: fmt.Sprintf("user%d", i), DeviceID: "phone", Attested: true}
		if err := pub.Report(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	p, err := policy.Parse("p.yaml", []byte(filterPolicy))
	if err != nil {
		t.Fatal(err)
	}
	var pulls atomic.Int32
	px.OnPublish("$JS.API.CONSUMER.MSG.NEXT."+streams.Config{}.Stream(streams.EventsStream)+".", func(string) string {
		if pulls.Add(1) == 2 {
			return "409 Consumer Deleted"
		}
		return ""
	})
	var logs testenv.SyncBuffer
	m, stop := runReplayDaemon(t, replayPublisher(t, px.URL), bucket.NewMemoryStore(bucket.MemoryOptions{}), p, slog.New(slog.NewTextHandler(&logs, nil)))
	defer stop()
	if !regexp.MustCompile(`msg="trust fetch failed; retrying.*consumer deleted`).MatchString(logs.String()) {
		t.Errorf("the failed fetch was not logged:\n%s", logs.String())
	}
	if n := testutil.ToFloat64(m.Errors.WithLabelValues("trust")); n != 1 {
		t.Errorf("errors_total{op=trust} = %v, want 1 (the one failed fetch)", n)
	}
	if want := fmt.Sprintf(`msg="trust record read" reports=%d`, enrolments); !strings.Contains(logs.String(), want) {
		t.Errorf("the trust record was not read whole (want %q):\n%s", want, logs.String())
	}
}
