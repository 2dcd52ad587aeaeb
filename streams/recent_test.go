package streams_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/streams"
)

// TestTrailReadsNewestFirst publishes 700 reports with 5 alerts among
// them (one shadow) and 300 audit events on the shared NATS server, and
// reads them back: the newest first, at most the limit, the alerts found
// across windows of reports, the shadow one marked.
func TestTrailReadsNewestFirst(t *testing.T) {
	t.Parallel()
	name, prefix := testenv.SharedStreams(t)
	cfg := streams.Config{Name: name, Prefix: prefix}
	p, _ := newPublisher(t, testenv.NATSURL(), streams.PublisherOptions{Config: cfg})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for i := range 700 {
		if err := p.Report(ctx, &streams.Report{TS: t0, Type: "login_failed", Source: "api", Account: "a"}); err != nil {
			t.Fatal(err)
		}
		if i%150 == 0 {
			a := &streams.Alert{ID: fmt.Sprint("al", i), TS: t0.Add(time.Duration(i) * time.Second), Kind: streams.AlertLockout,
				Subject: "account", SubjectID: fmt.Sprint("acct", i), Shadow: i == 300}
			if err := p.Alert(ctx, a); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 300 {
		v := float64(i)
		if err := p.Audit(ctx, &streams.Audit{AuditID: fmt.Sprint("au", i), TS: t0, Action: streams.AuditMultiplierSet, Subject: "ip", ID: "192.0.2.1", Value: &v}); err != nil {
			t.Fatal(err)
		}
	}
	tr := streams.NewTrail(p.JetStream(), cfg)

	alerts, err := tr.Alerts(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, raw := range alerts {
		var a struct {
			ID     string `json:"alert_id"`
			Shadow bool   `json:"shadow"`
		}
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, fmt.Sprint(a.ID, "/", a.Shadow))
	}
	if got, want := fmt.Sprint(ids), "[al600/false al450/false al300/true al150/false al0/false]"; got != want {
		t.Fatalf("alerts = %s, want %s", got, want)
	}
	two, err := tr.Alerts(ctx, 2)
	if err != nil || len(two) != 2 || !json.Valid(two[1]) {
		t.Fatalf("alerts limit 2 = %d entries, %v", len(two), err)
	}

	audits, err := tr.Audits(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	var vals []float64
	for _, raw := range audits {
		var a streams.Audit
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatal(err)
		}
		vals = append(vals, *a.Value)
	}
	if got, want := fmt.Sprint(vals), "[299 298 297 296 295 294 293]"; got != want {
		t.Fatalf("audits = %s, want %s", got, want)
	}
	all, err := tr.Audits(ctx, 1000)
	if err != nil || len(all) != 300 {
		t.Fatalf("audits limit 1000 = %d entries, %v; want all 300", len(all), err)
	}
}

// TestTrailOfEmptyStreams answers an empty list before anything is published.
func TestTrailOfEmptyStreams(t *testing.T) {
	t.Parallel()
	name, prefix := testenv.SharedStreams(t)
	cfg := streams.Config{Name: name, Prefix: prefix}
	p, _ := newPublisher(t, testenv.NATSURL(), streams.PublisherOptions{Config: cfg})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr := streams.NewTrail(p.JetStream(), cfg)
	for name, read := range map[string]func(context.Context, int) ([]json.RawMessage, error){"audits": tr.Audits, "alerts": tr.Alerts} {
		got, err := read(ctx, 10)
		if err != nil || got == nil || len(got) != 0 {
			t.Fatalf("%s = %v (nil %v), %v; want an empty list", name, got, got == nil, err)
		}
	}
}
