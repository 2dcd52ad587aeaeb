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

// trustLog is a memory store that records every device Trust writes.
type trustLog struct {
	*bucket.MemoryStore
	mu     sync.Mutex
	writes map[string]int // account/device -> writes
}

func (s *trustLog) Trust(ctx context.Context, sub bucket.Subject, device string, until time.Time) error {
	s.mu.Lock()
	s.writes[sub.ID+"/"+device]++
	s.mu.Unlock()
	return s.MemoryStore.Trust(ctx, sub, device, until)
}

func (s *trustLog) count(k string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes[k]
}

// TestStartingRiskdKeepsRevocations (7.1): a riskd that starts rebuilds
// its record of trusted devices from the login_succeeded reports still in
// the events stream, and writes it back at each re-assertion. An admin's
// revocation of a device (trust_revoke) and a freed device id
// (attestation_forget), both in the audit stream after the logins that
// enrolled them, must keep those enrolments out of the record: before,
// the starting riskd trusted alice's revoked phone and bob's freed tablet
// again. The login after the revocation (carol's phone) is trusted.
func TestStartingRiskdKeepsRevocations(t *testing.T) {
	t.Parallel()
	ns := testenv.StartNATS(t)
	pub := replayPublisher(t, ns.URL)
	ctx := context.Background()
	if err := streams.EnsureStreams(ctx, pub.JetStream(), streams.Config{}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC().Add(-time.Hour)
	login := func(id, account, device string, at time.Time) {
		t.Helper()
		r := streams.Report{V: 1, ID: id, TS: at, Type: streams.ReportLoginSucceeded, Source: "api", Account: account, DeviceID: device, Attested: true}
		if err := pub.Report(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	audit := func(action, subject, id, device string, at time.Time) {
		t.Helper()
		a := streams.Audit{V: 1, AuditID: action + id + device, TS: at, Action: action, Subject: subject, ID: id, DeviceID: device}
		if err := pub.Audit(ctx, &a); err != nil {
			t.Fatal(err)
		}
	}
	login("r1", "alice", "phone", t0)
	login("r2", "alice", "watch", t0)
	login("r3", "bob", "tablet", t0)
	login("r4", "carol", "phone", t0.Add(2*time.Minute)) // after the revocation
	audit(streams.AuditTrustRevoke, "account", "alice", "phone", t0.Add(time.Minute))
	audit(streams.AuditAttestationForget, "device", "tablet", "", t0.Add(time.Minute))
	p, err := policy.Parse("p.yaml", []byte(filterPolicy))
	if err != nil {
		t.Fatal(err)
	}
	store := &trustLog{MemoryStore: bucket.NewMemoryStore(bucket.MemoryOptions{}), writes: map[string]int{}}
	d, err := risk.New(risk.Options{Publisher: pub, Store: store, Metrics: risk.NewMetrics(prometheus.NewRegistry()),
		Logger: slog.New(slog.DiscardHandler), Policy: func() *policy.Policy { return p }, Reassert: 50 * time.Millisecond})
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
	// two re-assertions of the record (without StoreLost, each writes
	// every trusted device back): the second starts after the first wrote all
	deadline := time.Now().Add(30 * time.Second)
	for store.count("alice/watch") < 2 || store.count("carol/phone") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("riskd did not write its record back twice within 30 s: %v", store.writes)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, k := range []string{"alice/phone", "bob/tablet"} {
		if n := store.count(k); n != 0 {
			t.Errorf("%s written %d times: a revoked enrolment was trusted again", k, n)
		}
	}
}
