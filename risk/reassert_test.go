package risk_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// lapsingStore is a store whose first write once armed ends the lease
// (leading turns false, as when a lease lapses mid-loop) and that counts
// the writes made after it.
type lapsingStore struct {
	*bucket.MemoryStore
	armed, leading atomic.Bool
	before, after  atomic.Int32
}

func (s *lapsingStore) write() {
	if !s.armed.Load() {
		return
	}
	if s.leading.CompareAndSwap(true, false) {
		s.before.Add(1)
		return
	}
	s.after.Add(1)
}

func (s *lapsingStore) SetLock(ctx context.Context, sub bucket.Subject, l bucket.Lock) error {
	s.write()
	return s.MemoryStore.SetLock(ctx, sub, l)
}

func (s *lapsingStore) SetMultiplier(ctx context.Context, sub bucket.Subject, m bucket.Multiplier) error {
	s.write()
	return s.MemoryStore.SetMultiplier(ctx, sub, m)
}

func (s *lapsingStore) Trust(ctx context.Context, sub bucket.Subject, device string, until time.Time) error {
	s.write()
	return s.MemoryStore.Trust(ctx, sub, device, until)
}

// TestReassertStopsWhenTheLeaseLapses (7.5): the re-assertion of admin
// multipliers and trusted devices asks for the lease before each write: a
// leader whose lease lapses during the loop writes nothing more.
func TestReassertStopsWhenTheLeaseLapses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		admins, devices int
	}{
		{"admin multipliers", 5, 5},
		{"trusted devices", 0, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := testenv.StartNATS(t)
			pub := replayPublisher(t, ns.URL)
			ctx := context.Background()
			if err := streams.EnsureStreams(ctx, pub.JetStream(), streams.Config{}); err != nil {
				t.Fatal(err)
			}
			v := 0.5
			for i := 0; i < tc.admins; i++ {
				a := streams.Audit{V: 1, AuditID: fmt.Sprint("au", i), TS: time.Now().UTC(), Action: streams.AuditMultiplierSet,
					Subject: "ip", ID: fmt.Sprintf("192.0.2.%d", i+1), Value: &v}
				if err := pub.Audit(ctx, &a); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < tc.devices; i++ {
				r := streams.Report{V: 1, ID: fmt.Sprint("s", i), TS: time.Now().UTC(), Type: streams.ReportLoginSucceeded, Source: "api",
					Account: fmt.Sprint("user", i), DeviceID: "phone", Attested: true}
				if err := pub.Report(ctx, &r); err != nil {
					t.Fatal(err)
				}
			}
			p, err := policy.Parse("p.yaml", []byte(filterPolicy))
			if err != nil {
				t.Fatal(err)
			}
			// a first daemon consumes the reports, so the second has none
			// to act on: its only writes are re-assertions
			m1, stop1 := runReplayDaemon(t, pub, bucket.NewMemoryStore(bucket.MemoryOptions{}), p, slog.New(slog.DiscardHandler))
			testenv.Eventually(t, 10*time.Second, func() string {
				if n := testutil.ToFloat64(m1.Events.WithLabelValues("report")); n != float64(tc.devices) {
					return fmt.Sprintf("first daemon processed %v of %d reports", n, tc.devices)
				}
				return ""
			})
			stop1()

			store := &lapsingStore{MemoryStore: bucket.NewMemoryStore(bucket.MemoryOptions{})}
			store.leading.Store(true)
			d, err := risk.New(risk.Options{Publisher: replayPublisher(t, ns.URL), Store: store, Metrics: risk.NewMetrics(prometheus.NewRegistry()),
				Logger: slog.New(slog.DiscardHandler), Policy: func() *policy.Policy { return p },
				Reassert: time.Second, Leading: store.leading.Load})
			if err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- d.Run(rctx) }()
			select {
			case <-d.Ready():
			case err := <-done:
				t.Fatalf("daemon stopped before ready: %v", err)
			case <-time.After(30 * time.Second):
				t.Fatal("daemon not ready")
			}
			store.armed.Store(true)
			select {
			case err := <-done:
				if !errors.Is(err, risk.ErrNotLeading) {
					t.Fatalf("Run = %v, want ErrNotLeading", err)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("the daemon went on after its lease lapsed")
			}
			if b, a := store.before.Load(), store.after.Load(); b != 1 || a != 0 {
				t.Fatalf("%d writes while leading, %d after the lease lapsed; want 1 and 0", b, a)
			}
		})
	}
}
