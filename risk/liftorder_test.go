package risk_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

const oneLockoutPolicy = `version: 1
limits:
  - {name: ip, by: [ip], rate: 600/min}
risk:
  velocity:
    - {name: account-failures, event: login_failed, by: account, threshold: 2, window: 10m, action: lockout, duration: 15m}
`

// TestRestartKnowsTheLockAfterALift (6.5, replay): dave is locked, an
// admin lifts it, and two new failures lock him again. A riskd that
// starts then must rebuild that second lock as in force, as the riskd
// that set it knew it: one more failure sets nothing and alerts nothing.
// Before, the replay fed every report before the lift it read from the
// audit stream afterwards, so the second lock, set while the first was
// (for the replay) still in force, never fired there; the next failure
// fired the rule again: a third lockout alert for two lockouts.
func TestRestartKnowsTheLockAfterALift(t *testing.T) {
	t.Parallel()
	ns := testenv.StartNATS(t)
	pub := replayPublisher(t, ns.URL)
	ctx := context.Background()
	if err := streams.EnsureStreams(ctx, pub.JetStream(), streams.Config{}); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse("p.yaml", []byte(oneLockoutPolicy))
	if err != nil {
		t.Fatal(err)
	}
	store := bucket.NewMemoryStore(bucket.MemoryOptions{})
	log := slog.New(slog.DiscardHandler)
	n := 0
	fail := func(account string) {
		t.Helper()
		n++
		r := streams.Report{V: 1, ID: fmt.Sprint("r", n), TS: time.Now().UTC(), Type: streams.ReportLoginFailed, Source: "api", Account: account}
		if err := pub.Report(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	locked := func(account string) bool {
		_, ok, _ := store.GetLock(ctx, bucket.Subject{Kind: "account", ID: account})
		return ok
	}
	lockouts := func() uint64 {
		st, err := pub.JetStream().Stream(ctx, "TOLLGATE_EVENTS")
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(streams.DefaultPrefix+"alerts.lockout"))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects[streams.DefaultPrefix+"alerts.lockout"]
	}
	_, stop := runReplayDaemon(t, pub, store, p, log)
	fail("dave")
	fail("dave")
	waitFor(t, 5*time.Second, "dave locked", func() bool { return locked("dave") })
	a := streams.Audit{V: 1, AuditID: "lift-1", TS: time.Now().UTC(), Action: streams.AuditLockoutLift, Subject: "account", ID: "dave"}
	if err := pub.Audit(ctx, &a); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "dave's lock lifted", func() bool { return !locked("dave") })
	fail("dave")
	fail("dave")
	waitFor(t, 5*time.Second, "dave locked again", func() bool { return locked("dave") && lockouts() == 2 })
	stop()

	_, stop = runReplayDaemon(t, pub, store, p, log)
	defer stop()
	fail("dave")
	fail("ctl") // the control: once it is locked, dave's failure was processed
	fail("ctl")
	waitFor(t, 5*time.Second, "control locked", func() bool { return locked("ctl") })
	if got := lockouts(); got != 3 {
		t.Fatalf("%d lockout alerts, want 3 (dave's two and the control's): the restarted riskd fired dave's rule again", got)
	}
}
