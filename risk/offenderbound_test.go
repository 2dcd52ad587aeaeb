package risk_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/risk"
	"github.com/tollgate-dev/tollgate/signals"
	"github.com/tollgate-dev/tollgate/streams"
)

// TestOffenderListBounded: riskd writes the repeat-offender list to Redis
// every second for the limiters' GET /v1/admin/offenders. An attacker
// rotating device ids, each denied a few times a minute, made that one
// value as long as the keys tracked (1,501 here: 129 KB; up to 200,000
// entries, about 17 MB of JSON written to the decisions' Redis every
// second). The list shared and
// served is now the MaxOffendersListed (1,000) worst; the gauge still
// counts them all.
func TestOffenderListBounded(t *testing.T) {
	t.Parallel()
	const keys = 3 * risk.MaxOffendersListed / 2
	pub := replayPublisher(t, testenv.StartNATS(t).URL)
	ctx := context.Background()
	if err := streams.EnsureStreams(ctx, pub.JetStream(), streams.Config{}); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse("p.yaml", []byte("version: 1\nlimits:\n  - {name: device, by: [device], rate: 1/min}\nrisk:\n  repeat_offender: {per_minute: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	longest, bytes := 0, 0
	sink := func(_ context.Context, list []signals.Offender) error {
		b, _ := json.Marshal(list)
		mu.Lock()
		longest, bytes = max(longest, len(list)), max(bytes, len(b))
		mu.Unlock()
		return nil
	}
	m := risk.NewMetrics(prometheus.NewRegistry())
	d, err := risk.New(risk.Options{Publisher: pub, Store: bucket.NewMemoryStore(bucket.MemoryOptions{}), Policy: func() *policy.Policy { return p },
		Metrics: m, OffenderSink: sink, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runReady(t, ctx, d)
	now := time.Now().UTC()
	deny := func(dev string) {
		pub.Decision(&streams.Decision{TS: now, Endpoint: "GET /feed", Class: "read", Limit: "device", Result: "limited", DeviceID: dev})
	}
	for range 5 { // the worst offender
		deny("worst")
	}
	for i := range keys {
		deny("rot-" + strconv.Itoa(i))
		deny("rot-" + strconv.Itoa(i))
	}
	waitFor(t, 20*time.Second, "every offender counted", func() bool {
		return len(d.Offenders()) >= risk.MaxOffendersListed && testutil.ToFloat64(m.Offenders.WithLabelValues("device")) == keys+1
	})
	waitFor(t, 5*time.Second, "the sink called with a full list", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return longest >= risk.MaxOffendersListed
	})
	mu.Lock()
	defer mu.Unlock()
	if longest > risk.MaxOffendersListed {
		t.Fatalf("%d offenders shared (%d bytes of JSON a second), over %d", longest, bytes, risk.MaxOffendersListed)
	}
	list := d.Offenders()
	if len(list) > risk.MaxOffendersListed || list[0].Key != "worst" {
		t.Fatalf("served %d offenders, first %+v", len(list), list[0])
	}
}
