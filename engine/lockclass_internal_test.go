package engine

import (
	"os"
	"testing"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
)

// TestOwnLockKeys: a decision on a class checks, per lock subject, the
// subject's lock key and then the own key of each class-restricted lock
// rule of the class keyed by it; a policy without such rules (the bench
// policy) checks no extra key at all.
func TestOwnLockKeys(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../testdata/bench-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bench, err := policy.Parse("bench-policy.yaml", src)
	if err != nil {
		t.Fatal(err)
	}
	e := &Engine{}
	for ci := range bench.Classes {
		if _, own := e.lockPartsOf(bench, ci); own != nil {
			t.Fatalf("bench policy, class %s: own lock rules %v; want none", bench.Classes[ci], own)
		}
	}
	p, err := policy.Parse("p.yaml", []byte(`version: 1
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "POST /otp",        class: otp}
limits:
  - {name: all, by: [ip], rate: 1000/min}
risk:
  velocity:
    - {name: account-failures, event: login_failed, by: account, threshold: 3, window: 10m, action: lockout, duration: 15m}
    - {name: otp-flood, event: otp_sent, by: account, threshold: 3, window: 10m, action: lockout, duration: 1h, classes: [otp]}
    - {name: otp-step, event: otp_sent, by: account, threshold: 2, window: 10m, action: step_up, duration: 1h, classes: [otp, auth]}
`))
	if err != nil {
		t.Fatal(err)
	}
	e = &Engine{}
	for _, tc := range []struct {
		endpoint string
		want     []string
	}{
		{"POST /auth/login", []string{bucket.LockKey("", "account", "a"), bucket.RuleLockKey("", "account", "a", "otp-step"), bucket.LockKey("", "ip", "192.0.2.1")}},
		{"POST /otp", []string{bucket.LockKey("", "account", "a"), bucket.RuleLockKey("", "account", "a", "otp-flood"), bucket.RuleLockKey("", "account", "a", "otp-step")}},
	} {
		ci, _, err := routeOf(p, tc.endpoint)
		if err != nil {
			t.Fatal(err)
		}
		in := &Input{Endpoint: tc.endpoint, IP: "192.0.2.1", Account: "a"}
		in.ipKey = in.IP
		var d Decision
		e.appendLocks(p, ci, in, &d, false)
		var req bucket.Request
		handOutKeys(&d, &req, false)
		if len(req.Locks) != len(tc.want) {
			t.Fatalf("%s: locks %q; want %q", tc.endpoint, req.Locks, tc.want)
		}
		for i := range tc.want {
			if req.Locks[i] != tc.want[i] {
				t.Fatalf("%s: locks %q; want %q", tc.endpoint, req.Locks, tc.want)
			}
		}
	}
}
