package risk_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/risk"
	"github.com/tollgate-dev/tollgate/streams"
)

// slowTrust is a memory store whose first Trust write holds until an
// Untrust arrives (or 2 s pass): a store write in flight while riskd
// applies a revocation.
type slowTrust struct {
	*bucket.MemoryStore
	once      sync.Once
	entered   chan struct{}
	untrusted chan struct{}
	wrote     chan struct{}
	untOnce   sync.Once
}

func (s *slowTrust) Trust(ctx context.Context, sub bucket.Subject, device string, until time.Time) error {
	first := false
	s.once.Do(func() {
		first = true
		close(s.entered)
		select {
		case <-s.untrusted:
		case <-time.After(2 * time.Second): // riskd serialises them: the revocation waits for this write
		}
	})
	err := s.MemoryStore.Trust(ctx, sub, device, until)
	if first {
		close(s.wrote)
	}
	return err
}

func (s *slowTrust) Untrust(ctx context.Context, sub bucket.Subject, device string) (bool, error) {
	was, err := s.MemoryStore.Untrust(ctx, sub, device)
	s.untOnce.Do(func() { close(s.untrusted) })
	return was, err
}

// TestRevocationDuringTrustWrite (7.1): riskd records alice's phone from
// a login_succeeded and writes it to the store; an admin revokes the
// phone (trust_revoke) while that write is in flight (a slow or
// reconnecting Redis). Before, riskd applied the revocation beside the
// write: it dropped the phone from its record and untrusted it in the
// store, and then the write landed, so the stolen phone stayed trusted
// for trusted_for (30 d) and no re-assertion ever took it out. The write
// and the revocation now take turns: the phone ends untrusted.
func TestRevocationDuringTrustWrite(t *testing.T) {
	t.Parallel()
	ns := testenv.StartNATS(t)
	pub := replayPublisher(t, ns.URL)
	ctx := context.Background()
	if err := streams.EnsureStreams(ctx, pub.JetStream(), streams.Config{}); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse("p.yaml", []byte(filterPolicy))
	if err != nil {
		t.Fatal(err)
	}
	store := &slowTrust{MemoryStore: bucket.NewMemoryStore(bucket.MemoryOptions{}),
		entered: make(chan struct{}), untrusted: make(chan struct{}), wrote: make(chan struct{})}
	d, err := risk.New(risk.Options{Publisher: pub, Store: store, Metrics: risk.NewMetrics(prometheus.NewRegistry()),
		Logger: slog.New(slog.DiscardHandler), Policy: func() *policy.Policy { return p }, Reassert: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	<-d.Ready()
	now := time.Now().UTC()
	login := streams.Report{V: 1, ID: "r1", TS: now, Type: streams.ReportLoginSucceeded, Source: "api", Account: "alice", DeviceID: "phone", Attested: true}
	if err := pub.Report(ctx, &login); err != nil {
		t.Fatal(err)
	}
	<-store.entered
	revoke := streams.Audit{V: 1, AuditID: "a1", TS: now.Add(time.Second), Action: streams.AuditTrustRevoke, Subject: "account", ID: "alice", DeviceID: "phone"}
	if err := pub.Audit(ctx, &revoke); err != nil {
		t.Fatal(err)
	}
	<-store.untrusted // riskd applied the revocation
	<-store.wrote     // and the write in flight landed
	ds, err := store.TrustedDevices(ctx, bucket.Subject{Kind: "account", ID: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 0 {
		t.Fatalf("after the revocation alice trusts %v: the write in flight put the revoked phone back", ds)
	}
}
