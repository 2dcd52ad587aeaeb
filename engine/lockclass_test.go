package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/risk"
	"github.com/tollgate-dev/tollgate/signals"
	"github.com/tollgate-dev/tollgate/streams"
)

// lockClassPolicy has a login lockout (class auth) and a longer otp-flood
// lockout restricted to class otp, both keyed by account.
const lockClassPolicy = `version: 1
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "POST /otp",        class: otp}
limits:
  - {name: all, by: [ip], rate: 1000/min}
risk:
  velocity:
    - {name: account-failures, event: login_failed, by: account, threshold: 3, window: 10m, action: lockout, duration: 15m}
    - {name: otp-flood, event: otp_sent, by: account, threshold: 3, window: 10m, action: lockout, duration: 1h, classes: [otp]}
`

// TestClassLocksKeptApart: the otp-flood lock, written after (or before)
// the login lockout of the same account, neither replaces nor keeps out
// the login lockout; each answers on its own classes (memory store, with
// and without the L1 cache), and one lift ends both.
func TestClassLocksKeptApart(t *testing.T) {
	t.Parallel()
	p, err := policy.Parse("p.yaml", []byte(lockClassPolicy))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		first string // the event type flooded first
		l1    bool
	}{
		{"login then otp", "login_failed", false},
		{"otp then login", "otp_sent", false},
		{"login then otp, L1", "login_failed", true},
		{"otp then login, L1", "otp_sent", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			now := time.Now()
			store := bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return now }})
			var cache *engine.L1
			admin := bucket.Store(store)
			if tc.l1 {
				cache = engine.NewL1(engine.L1Options{TTL: time.Minute})
				admin = cache.Wrap(store)
			}
			e, err := engine.New(engine.Options{Store: store, Policy: func() *policy.Policy { return p }, L1: cache,
				Clock: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			sig := signals.New(signals.Options{Risk: p.Risk, Limits: p.Limits})
			seq := uint64(0)
			report := func(typ string) {
				for i := 0; i < 3; i++ {
					seq++
					for _, a := range sig.ApplyReport(seq, 0, &streams.Report{Type: typ, TS: now, Account: "alice", IP: "203.0.113.9"}, nil) {
						if err := risk.WriteAction(ctx, admin, p, &a); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			decide := func(endpoint string) engine.Decision {
				var d engine.Decision
				if err := e.Decide(ctx, &engine.Input{Endpoint: endpoint, IP: "198.51.100.1", Account: "alice", Cost: 1}, &d); err != nil {
					t.Fatal(err)
				}
				return d
			}
			second := map[string]string{"login_failed": "otp_sent", "otp_sent": "login_failed"}[tc.first]
			report(tc.first)
			report(second)
			if d := decide("POST /auth/login"); d.Outcome != engine.Locked || d.Lock.Rule != "account-failures" {
				t.Fatalf("login: %v by %q; want Locked by account-failures", d.Outcome, d.Lock.Rule)
			}
			if d := decide("POST /otp"); d.Outcome != engine.Locked || d.Lock.Rule != "otp-flood" {
				t.Fatalf("otp: %v by %q; want Locked by otp-flood", d.Outcome, d.Lock.Rule)
			}
			if ls, err := store.Locks(ctx, bucket.Subject{Kind: "account", ID: "alice"}); err != nil || len(ls) != 2 {
				t.Fatalf("Locks = %+v %v; want both", ls, err)
			}
			if was, err := admin.ClearLock(ctx, bucket.Subject{Kind: "account", ID: "alice"}); err != nil || !was {
				t.Fatalf("ClearLock = %v %v", was, err)
			}
			for _, ep := range []string{"POST /auth/login", "POST /otp"} {
				if d := decide(ep); d.Outcome != engine.Allowed {
					t.Fatalf("%s after the lift: %v by %q; want Allowed", ep, d.Outcome, d.Lock.Rule)
				}
			}
		})
	}
}
