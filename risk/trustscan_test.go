package risk_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/risk"
	"github.com/tollgate-dev/tollgate/streams"
)

// trustWrites is a store that counts the trust writes that succeeded, per
// "account/device", so a test can wait for whole re-assertions.
type trustWrites struct {
	bucket.Store
	mu     sync.Mutex
	writes map[string]int
}

func (s *trustWrites) Trust(ctx context.Context, sub bucket.Subject, device string, until time.Time) error {
	err := s.Store.Trust(ctx, sub, device, until)
	if err == nil {
		s.mu.Lock()
		s.writes[sub.ID+"/"+device]++
		s.mu.Unlock()
	}
	return err
}

func (s *trustWrites) count(k string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes[k]
}

// ScanTrust passes the wrapped store's (the daemon asks its Store).
func (s *trustWrites) ScanTrust(ctx context.Context, fn func(account, device string, until time.Time) error) error {
	return s.Store.(bucket.TrustScanner).ScanTrust(ctx, fn)
}

// runTrustDaemon runs a daemon of filterPolicy on pub and store, writing
// its trust record back every 20 ms, until the test ends or stop is
// called; it returns once the daemon is ready.
func runTrustDaemon(t *testing.T, pub *streams.Publisher, store risk.Writer, m *risk.Metrics, log *slog.Logger) (stop func()) {
	t.Helper()
	p, err := policy.Parse("p.yaml", []byte(filterPolicy))
	if err != nil {
		t.Fatal(err)
	}
	d, err := risk.New(risk.Options{Publisher: pub, Store: store, Metrics: m, Logger: log,
		Policy: func() *policy.Policy { return p }, Reassert: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("daemon stopped before ready: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("daemon not ready within 60 s")
	}
	return stop
}

// waitWrites waits until k has been written n times more than before.
func waitWrites(t *testing.T, s *trustWrites, k string, before, n int) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() string {
		if got := s.count(k) - before; got < n {
			return fmt.Sprintf("riskd wrote %s back %d times, want %d", k, got, n)
		}
		return ""
	})
}

// TestStartingRiskdKnowsOldEnrolments (7.1): alice's phone was enrolled 3
// days ago, so the events stream (48 h) no longer holds the login that
// enrolled it; only Redis does. A riskd that starts then, and a Redis
// that restarts empty after it, must give the phone its trust back. Before,
// riskd rebuilt its record from the stream alone: bob's login of an hour
// ago came back, alice's phone never did, and her exempt_attested lockout
// shut her out.
func TestStartingRiskdKnowsOldEnrolments(t *testing.T) {
	t.Parallel()
	rs := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	rstore := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: 5 * time.Second})
	t.Cleanup(func() { rstore.Close() })
	store := &trustWrites{Store: rstore, writes: map[string]int{}}
	ns := testenv.StartNATS(t)
	pub := replayPublisher(t, ns.URL)
	ctx := context.Background()
	if err := streams.EnsureStreams(ctx, pub.JetStream(), streams.Config{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	alice := bucket.Subject{Kind: "account", ID: "alice"}
	aliceUntil := now.Add(-72 * time.Hour).Add(risk.DefaultTrustFor).Truncate(time.Microsecond)
	if err := rstore.Trust(ctx, alice, "phone", aliceUntil); err != nil { // no report left in the stream
		t.Fatal(err)
	}
	bob := streams.Report{V: 1, ID: "r1", TS: now.Add(-time.Hour), Type: streams.ReportLoginSucceeded, Source: "api",
		Account: "bob", DeviceID: "tablet", Attested: true}
	if err := pub.Report(ctx, &bob); err != nil {
		t.Fatal(err)
	}
	runTrustDaemon(t, pub, store, risk.NewMetrics(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))

	rs.Restart(t)
	// two more re-assertions of bob's tablet after the restart: the
	// second starts after the first wrote the whole record back
	waitWrites(t, store, "bob/tablet", store.count("bob/tablet"), 2)
	ds, err := rstore.TrustedDevices(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].Device != "phone" || !ds[0].Until.Equal(aliceUntil) {
		t.Fatalf("alice's trusted devices after Redis restarted empty: %+v; want her phone until %v", ds, aliceUntil)
	}
}

// failingScan is a memory store whose first ScanTrust fails.
type failingScan struct {
	*bucket.MemoryStore
	scans atomic.Int32
}

func (s *failingScan) ScanTrust(ctx context.Context, fn func(account, device string, until time.Time) error) error {
	if s.scans.Add(1) == 1 {
		return errors.New("scan trust: connection reset")
	}
	return s.MemoryStore.ScanTrust(ctx, fn)
}

// TestTrustScanOutlastsFailure (7.5): a scan of the store's trust sets
// that fails is logged, counted (errors_total{op="trust_scan"}) and
// retried before riskd is ready, never taken for a complete record: the
// enrolment it failed to read is re-asserted.
func TestTrustScanOutlastsFailure(t *testing.T) {
	t.Parallel()
	mem := &failingScan{MemoryStore: bucket.NewMemoryStore(bucket.MemoryOptions{})}
	until := time.Now().Add(24 * time.Hour)
	if err := mem.Trust(context.Background(), bucket.Subject{Kind: "account", ID: "alice"}, "phone", until); err != nil {
		t.Fatal(err)
	}
	ns := testenv.StartNATS(t)
	pub := replayPublisher(t, ns.URL)
	m := risk.NewMetrics(prometheus.NewRegistry())
	var logs testenv.SyncBuffer
	store := &trustWrites{Store: mem, writes: map[string]int{}}
	runTrustDaemon(t, pub, store, m, slog.New(slog.NewTextHandler(&logs, nil)))
	if !regexp.MustCompile(`msg="trust scan failed; retrying.*connection reset`).MatchString(logs.String()) {
		t.Errorf("the failed scan was not logged:\n%s", logs.String())
	}
	if n := testutil.ToFloat64(m.Errors.WithLabelValues("trust_scan")); n != 1 {
		t.Errorf("errors_total{op=trust_scan} = %v, want 1 (the one failed scan)", n)
	}
	if want := `msg="trust record scanned" enrolments=1`; !strings.Contains(logs.String(), want) {
		t.Errorf("the store's trust sets were not read (want %q):\n%s", want, logs.String())
	}
	waitWrites(t, store, "alice/phone", 0, 1)
}
