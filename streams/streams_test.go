package streams_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/streams"
)

func embedded(t testing.TB) *streams.Embedded {
	t.Helper()
	e, err := streams.StartEmbedded(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	return e
}

func newPublisher(t testing.TB, url string, o streams.PublisherOptions) (*streams.Publisher, *nats.Conn) {
	t.Helper()
	nc, err := streams.Connect(url, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	p, err := streams.NewPublisher(nc, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := streams.EnsureStreams(ctx, p.JetStream(), o.Config); err != nil {
		t.Fatal(err)
	}
	return p, nc
}

// TestDecisionsAreBatchedPerClass publishes 600 decisions of two classes
// and reads them back from the stream: all there, in batches, in order.
func TestDecisionsAreBatchedPerClass(t *testing.T) {
	t.Parallel()
	e := embedded(t)
	p, _ := newPublisher(t, e.URL, streams.PublisherOptions{BatchSize: 256})
	for i := 0; i < 600; i++ {
		class := "read"
		if i%3 == 0 {
			class = "auth"
		}
		p.Decision(&streams.Decision{RequestID: string(rune('a' + i%26)), Class: class, Endpoint: "GET /", IP: "192.0.2.1", Allowed: true, Result: "allowed"})
	}
	p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	oc, err := p.JetStream().OrderedConsumer(ctx, "TOLLGATE_DECISIONS", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	msgs := 0
	for counts["read"]+counts["auth"] < 600 {
		m, err := oc.Next(jetstream.FetchMaxWait(2 * time.Second))
		if err != nil {
			t.Fatalf("after %v: %v", counts, err)
		}
		var b streams.DecisionBatch
		if err := json.Unmarshal(m.Data(), &b); err != nil || b.V != 1 {
			t.Fatalf("batch: %v %+v", err, b)
		}
		for _, d := range b.Decisions {
			if m.Subject() != "tollgate.decisions."+d.Class {
				t.Fatalf("decision of class %s on %s", d.Class, m.Subject())
			}
			counts[d.Class]++
		}
		msgs++
	}
	if counts["auth"] != 200 || counts["read"] != 400 || msgs >= 600 || p.Dropped() != 0 {
		t.Fatalf("counts %v in %d messages, dropped %d", counts, msgs, p.Dropped())
	}
}

// TestNATSDownDropsAndCounts: with the server gone, Decision never blocks
// and every decision is counted as dropped; reports fail fast.
//
// That Decision never blocks is shown without a clock: the publisher is
// held where it cannot publish (its first batch's drop, in OnDrop, waits
// until the test lets it go), and while it is held the remaining calls
// all return, the queue holding what it can and the excess dropped and
// counted at once, each call's drop reported before it returns.
func TestNATSDownDropsAndCounts(t *testing.T) {
	t.Parallel()
	const batch, queue, calls = 50, 100, 1000
	ns := testenv.StartNATS(t)
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var dropped atomic.Int64
	p, nc := newPublisher(t, ns.URL, streams.PublisherOptions{QueueSize: queue, BatchSize: batch, FlushInterval: time.Hour,
		OnDrop: func(n int) {
			if n > 1 { // a batch the publisher could not publish: hold it there
				once.Do(func() { close(held) })
				<-release
			}
			dropped.Add(int64(n))
		}})
	free := sync.OnceFunc(func() { close(release) })
	defer free() // before the cleanup's Close, which waits for the publisher
	ns.Stop()
	testenv.Eventually(t, 10*time.Second, func() string {
		if nc.IsConnected() {
			return "the client has not noticed that NATS is gone"
		}
		return ""
	})
	d := &streams.Decision{Class: "read", IP: "192.0.2.1"}
	for i := 0; i < batch; i++ { // the publisher takes these, one batch, and is held
		p.Decision(d)
	}
	<-held
	for i := batch; i < calls; i++ {
		p.Decision(d)
	}
	if got, want := dropped.Load(), int64(calls-batch-queue); got != want {
		t.Fatalf("with the publisher held, %d decisions dropped and reported, want %d (all but the held batch and a full queue)", got, want)
	}
	free() // the held batch's drop is counted; the queue's two batches follow
	testenv.Eventually(t, 10*time.Second, func() string {
		if n := dropped.Load(); n != calls || p.Dropped() != calls {
			return fmt.Sprintf("dropped %d (reported %d) of %d", p.Dropped(), n, calls)
		}
		return ""
	})
	if err := p.Report(context.Background(), &streams.Report{ID: "x", Type: "login_failed"}); err == nil {
		t.Fatal("report with NATS down must fail")
	}
}

func TestReportsAndAlertsAreAcked(t *testing.T) {
	t.Parallel()
	e := embedded(t)
	p, _ := newPublisher(t, e.URL, streams.PublisherOptions{})
	ctx := context.Background()
	r := &streams.Report{V: 1, ID: "01TEST", Type: "login_failed", Account: "alice"}
	for i := 0; i < 2; i++ { // a retried report is stored once
		if err := p.Report(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Alert(ctx, &streams.Alert{V: 1, ID: "a1", Kind: "lockout", Subject: "account", SubjectID: "alice"}); err != nil {
		t.Fatal(err)
	}
	s, err := p.JetStream().Stream(ctx, "TOLLGATE_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	info, _ := s.Info(ctx)
	if info.State.Msgs != 2 {
		t.Fatalf("events stream holds %d messages, want 2 (report once, alert once)", info.State.Msgs)
	}
	// EnsureStreams again is harmless
	if err := streams.EnsureStreams(ctx, p.JetStream(), streams.Config{}); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkDecision is the request path's cost of publishing one decision
// (run it with -benchtime=500000x so the queue holds them all and none
// is dropped; the "dropped" metric says if some were).
func BenchmarkDecision(b *testing.B) {
	e := embedded(b)
	p, _ := newPublisher(b, e.URL, streams.PublisherOptions{QueueSize: 1 << 20})
	d := &streams.Decision{TS: time.Now(), RequestID: "01M8P6ZKNNK0QBD6RW7G32XJ6J", Endpoint: "POST /auth/login", Class: "auth",
		Limit: "login-ip", Allowed: true, Result: "allowed", Remaining: 4, IP: "198.51.100.7", UserID: "u_42", DeviceID: "d_1", Account: "alice"}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p.Decision(d)
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(p.Dropped()), "dropped")
}

// TestDecisionFieldsAlwaysPresent: every field the contract lists is in
// each decision's JSON, even when the request lacked that key part.
func TestDecisionFieldsAlwaysPresent(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(streams.DecisionBatch{V: 1, Decisions: []streams.Decision{{Class: "read", IP: "192.0.2.1"}}})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Decisions []map[string]json.RawMessage `json:"decisions"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ts", "request_id", "endpoint", "limit", "allowed", "remaining", "ip", "asn", "user_id", "device_id", "account"} {
		if _, ok := got.Decisions[0][k]; !ok {
			t.Errorf("decision JSON lacks %q: %s", k, b)
		}
	}
}

// TestLargeDecisionsAreBatchedBySize: decisions within the contract's
// bounds (16 attributes of 256 bytes, '<' escaped to six bytes) are
// ~25 KB each, so 256 of them pass NATS's max payload. Batches are cut
// by size, by the batch-size path and by Close's final flush alike, and
// only a decision no message can carry is dropped, alone and counted.
func TestLargeDecisionsAreBatchedBySize(t *testing.T) {
	t.Parallel()
	large := map[string]string{}
	for i := 0; i < 16; i++ {
		large[fmt.Sprintf("a%02d", i)] = strings.Repeat("<", 256)
	}
	for _, tc := range []struct {
		name string
		n    int // decisions, the first normal, the rest large
	}{
		{"full batches", 512},
		{"close flushes", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := embedded(t)
			p, nc := newPublisher(t, e.URL, streams.PublisherOptions{BatchSize: 256, FlushInterval: time.Hour})
			for i := 0; i < tc.n; i++ {
				d := &streams.Decision{RequestID: fmt.Sprintf("r%04d", i), Class: "read", Endpoint: "GET /", IP: "192.0.2.1", Allowed: true, Result: "allowed"}
				if i > 0 {
					d.Attributes = large
				}
				p.Decision(d)
				if i == 1 { // one no message can carry
					p.Decision(&streams.Decision{RequestID: "huge", Class: "read", Attributes: map[string]string{"x": strings.Repeat("a", int(nc.MaxPayload()))}})
				}
			}
			p.Close()
			if got := p.Dropped(); got != 1 {
				t.Errorf("dropped %d decisions, want 1 (the one larger than max payload %d)", got, nc.MaxPayload())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			oc, err := p.JetStream().OrderedConsumer(ctx, "TOLLGATE_DECISIONS", jetstream.OrderedConsumerConfig{})
			if err != nil {
				t.Fatal(err)
			}
			next := 0
			for next < tc.n {
				m, err := oc.Next(jetstream.FetchMaxWait(2 * time.Second))
				if err != nil {
					t.Fatalf("after %d of %d decisions: %v", next, tc.n, err)
				}
				if len(m.Data()) > int(nc.MaxPayload()) {
					t.Fatalf("message of %d bytes, max payload %d", len(m.Data()), nc.MaxPayload())
				}
				var b streams.DecisionBatch
				if err := json.Unmarshal(m.Data(), &b); err != nil || b.V != 1 {
					t.Fatalf("batch: %v", err)
				}
				for _, d := range b.Decisions {
					if want := fmt.Sprintf("r%04d", next); d.RequestID != want {
						t.Fatalf("decision %q, want %q", d.RequestID, want)
					}
					if next > 0 && d.Attributes["a15"] != large["a15"] {
						t.Fatalf("decision %q lost its attributes", d.RequestID)
					}
					next++
				}
			}
		})
	}
}
