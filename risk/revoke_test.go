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
	ts := newTrustStream(t)
	t0 := time.Now().UTC().Add(-time.Hour)
	ts.login("r1", "alice", "phone", t0, time.Time{})
	ts.login("r2", "alice", "watch", t0, time.Time{})
	ts.login("r3", "bob", "tablet", t0, time.Time{})
	ts.login("r4", "carol", "phone", t0.Add(2*time.Minute), time.Time{}) // after the revocation
	ts.audit(streams.AuditTrustRevoke, "account", "alice", "phone", t0.Add(time.Minute))
	ts.audit(streams.AuditAttestationForget, "device", "tablet", "", t0.Add(time.Minute))
	store := ts.reassertTwice(t, "alice/watch", "carol/phone")
	for _, k := range []string{"alice/phone", "bob/tablet"} {
		if n := store.count(k); n != 0 {
			t.Errorf("%s written %d times: a revoked enrolment was trusted again", k, n)
		}
	}
}

// TestTokenIssuedBeforeRevocation (7.1): a device token issued before an
// admin revoked the device's trust proves the device as it was then. The
// thief of alice's phone logs in with the phone's token ten minutes after
// the revocation (past its skew, so the login's time alone no longer
// tells): before, riskd trusted the phone again, exempt from alice's
// lockouts, until its token ran out and for trusted_for after. The same
// holds for a revocation of every device of an account and for a freed
// id; a token issued after the revocation (the device attested again),
// a device the revocation did not name, and a report that carries no
// expiry (a limiter older than it: judged by its time alone) enrol.
func TestTokenIssuedBeforeRevocation(t *testing.T) {
	t.Parallel()
	ts := newTrustStream(t)
	t0 := time.Now().UTC().Add(-time.Hour)
	validFor := policy.DefaultAttestationValidFor
	before, after := t0.Add(validFor), t0.Add(5*time.Minute+validFor) // token expiries: issued at t0, t0+5m
	ts.audit(streams.AuditTrustRevoke, "account", "alice", "phone", t0.Add(time.Minute))
	ts.audit(streams.AuditTrustRevoke, "account", "dave", "", t0.Add(time.Minute))
	ts.audit(streams.AuditAttestationForget, "device", "tablet", "", t0.Add(time.Minute))
	ts.audit(streams.AuditTrustRevoke, "account", "erin", "phone", t0.Add(time.Minute))
	late := t0.Add(10 * time.Minute)
	ts.login("r1", "alice", "phone", late, before) // the thief
	ts.login("r2", "alice", "watch", late, before)
	ts.login("r3", "bob", "tablet", late, before) // the freed id's former holder
	ts.login("r4", "dave", "phone", late, before)
	ts.login("r5", "dave", "tablet", late, after)
	ts.login("r6", "carol", "phone", late, after)
	ts.login("r7", "erin", "phone", late, time.Time{})
	store := ts.reassertTwice(t, "alice/watch", "dave/tablet", "carol/phone", "erin/phone")
	for _, k := range []string{"alice/phone", "bob/tablet", "dave/phone"} {
		if n := store.count(k); n != 0 {
			t.Errorf("%s written %d times: a token issued before its revocation trusted it again", k, n)
		}
	}
}

// trustStream is a private NATS with riskd's streams, to publish the
// reports and audit records a starting riskd reads back.
type trustStream struct {
	t   *testing.T
	pub *streams.Publisher
}

func newTrustStream(t *testing.T) *trustStream {
	t.Helper()
	ns := testenv.StartNATS(t)
	pub := replayPublisher(t, ns.URL)
	if err := streams.EnsureStreams(context.Background(), pub.JetStream(), streams.Config{}); err != nil {
		t.Fatal(err)
	}
	return &trustStream{t: t, pub: pub}
}

// login publishes an attested login_succeeded of device to account at at,
// with a device token expiring at exp (zero: the report carries none).
func (s *trustStream) login(id, account, device string, at, exp time.Time) {
	s.t.Helper()
	r := streams.Report{V: 1, ID: id, TS: at, Type: streams.ReportLoginSucceeded, Source: "api", Account: account,
		DeviceID: device, Attested: true, TokenExpires: exp}
	if err := s.pub.Report(context.Background(), &r); err != nil {
		s.t.Fatal(err)
	}
}

// audit publishes an audit record.
func (s *trustStream) audit(action, subject, id, device string, at time.Time) {
	s.t.Helper()
	a := streams.Audit{V: 1, AuditID: action + id + device, TS: at, Action: action, Subject: subject, ID: id, DeviceID: device}
	if err := s.pub.Audit(context.Background(), &a); err != nil {
		s.t.Fatal(err)
	}
}

// reassertTwice starts riskd on the streams with a memory store and
// returns the store once riskd wrote each of want (account/device) back
// twice: without StoreLost every re-assertion writes the whole record, so
// the second starts after the first wrote everything it would.
func (s *trustStream) reassertTwice(t *testing.T, want ...string) *trustLog {
	t.Helper()
	p, err := policy.Parse("p.yaml", []byte(filterPolicy))
	if err != nil {
		t.Fatal(err)
	}
	store := &trustLog{MemoryStore: bucket.NewMemoryStore(bucket.MemoryOptions{}), writes: map[string]int{}}
	d, err := risk.New(risk.Options{Publisher: s.pub, Store: store, Metrics: risk.NewMetrics(prometheus.NewRegistry()),
		Logger: slog.New(slog.DiscardHandler), Policy: func() *policy.Policy { return p }, Reassert: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for _, k := range want {
		for store.count(k) < 2 {
			if time.Now().After(deadline) {
				t.Fatalf("riskd did not write %s back twice within 30 s: %v", k, store.writes)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return store
}
