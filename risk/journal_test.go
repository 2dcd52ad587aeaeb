package risk_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/risk"
	"github.com/tollgate-dev/tollgate/streams"
)

// TestRedisAndRiskdLostTogetherKeepOldEnrolments (7.1): alice's phone
// was enrolled by a login the events stream no longer holds (48 h, where
// trust lasts 30 days), and then riskd and Redis are lost together (one
// host rebooted, a Redis without persistence). The riskd that starts
// finds neither the login nor the trust set; before the trust journal it
// gave the phone nothing back, and her exempt_attested lockout shut her
// out. Now riskd journals every enrolment (streams.TrustStream) and reads
// the journal at start: the phone is trusted again, until its end.
func TestRedisAndRiskdLostTogetherKeepOldEnrolments(t *testing.T) {
	t.Parallel()
	rs := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	rstore := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: 5 * time.Second})
	t.Cleanup(func() { rstore.Close() })
	ns := testenv.StartNATS(t)
	pub := replayPublisher(t, ns.URL)
	ctx := context.Background()
	if err := streams.EnsureStreams(ctx, pub.JetStream(), streams.Config{}); err != nil {
		t.Fatal(err)
	}
	js := pub.JetStream()
	log := slog.New(slog.DiscardHandler)
	stop := runTrustDaemon(t, pub, &trustWrites{Store: rstore, writes: map[string]int{}}, risk.NewMetrics(prometheus.NewRegistry()), log)

	login := time.Now().UTC().Add(-72 * time.Hour).Truncate(time.Millisecond)
	if err := pub.Report(ctx, &streams.Report{V: 1, ID: "r1", TS: login, Type: streams.ReportLoginSucceeded, Source: "api",
		Account: "alice", DeviceID: "phone", Attested: true}); err != nil {
		t.Fatal(err)
	}
	e := waitJournaled(t, js, "alice", "phone")
	until := login.Add(risk.DefaultTrustFor)
	if e.Account != "alice" || e.Device != "phone" || !e.Until.Equal(until) || !e.At.Equal(login) {
		t.Fatalf("journaled %+v, want alice's phone until %v, at %v", e, until, login)
	}

	// riskd and Redis lost together, the login gone from the events stream
	stop()
	events, err := js.Stream(ctx, streams.Config{}.Stream(streams.EventsStream))
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	rs.Restart(t)
	store := &trustWrites{Store: rstore, writes: map[string]int{}}
	runTrustDaemon(t, pub, store, risk.NewMetrics(prometheus.NewRegistry()), log)
	waitWrites(t, store, "alice/phone", 0, 1)
	ds, err := rstore.TrustedDevices(ctx, bucket.Subject{Kind: "account", ID: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].Device != "phone" || !ds[0].Until.Equal(until) {
		t.Fatalf("alice's trusted devices after riskd and Redis were lost: %+v; want her phone until %v", ds, until)
	}
}

// TestTrustJournalRetries (7.5): a journal that cannot be written (its
// stream gone, as a riskd user without leave to publish tollgate.trust.>
// is refused) costs riskd nothing but the journal: the failure is logged
// and counted (errors_total{op="trust_journal"}), later flushes back off,
// and once the stream is back the enrolment is journaled.
func TestTrustJournalRetries(t *testing.T) {
	t.Parallel()
	ns := testenv.StartNATS(t)
	pub := replayPublisher(t, ns.URL)
	ctx := context.Background()
	js := pub.JetStream()
	m := risk.NewMetrics(prometheus.NewRegistry())
	var logs testenv.SyncBuffer
	store := &trustWrites{Store: bucket.NewMemoryStore(bucket.MemoryOptions{}), writes: map[string]int{}}
	runTrustDaemon(t, pub, store, m, slog.New(slog.NewTextHandler(&logs, nil)))
	journal := streams.Config{}.Stream(streams.TrustStream)
	if err := js.DeleteStream(ctx, journal); err != nil {
		t.Fatal(err)
	}
	if err := pub.Report(ctx, &streams.Report{V: 1, ID: "r1", TS: time.Now().UTC(), Type: streams.ReportLoginSucceeded, Source: "api",
		Account: "alice", DeviceID: "phone", Attested: true}); err != nil {
		t.Fatal(err)
	}
	waitWrites(t, store, "alice/phone", 0, 1) // enrolled in the store all the same
	testenv.Eventually(t, 20*time.Second, func() string {
		if n := testutil.ToFloat64(m.Errors.WithLabelValues("trust_journal")); n < 1 {
			return "no trust_journal error counted"
		}
		if !strings.Contains(logs.String(), `msg="trust journal not written; retrying" enrolments=1`) {
			return "the failed flush was not logged:\n" + logs.String()
		}
		return ""
	})
	if err := streams.EnsureStreams(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	waitJournaled(t, js, "alice", "phone") // the stream came back
}

// waitJournaled waits until the trust journal of the default streams
// holds account's enrolment of device, and returns it.
func waitJournaled(t *testing.T, js jetstream.JetStream, account, device string) streams.TrustEnrolment {
	t.Helper()
	var e streams.TrustEnrolment
	testenv.Eventually(t, 30*time.Second, func() string {
		st, err := js.Stream(context.Background(), streams.Config{}.Stream(streams.TrustStream))
		if err != nil {
			return err.Error()
		}
		m, err := st.GetLastMsgForSubject(context.Background(), streams.TrustSubject(streams.DefaultPrefix, account, device))
		if err != nil {
			return account + "'s " + device + " is not journaled: " + err.Error()
		}
		if err := json.Unmarshal(m.Data, &e); err != nil {
			return err.Error()
		}
		return ""
	})
	return e
}
