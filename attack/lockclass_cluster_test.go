package attack

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/service"
)

// Attack: TestAttackOtpFloodDoesNotLiftLoginLockout's otp flood on a
// limiter and riskd that share a Redis Cluster (3 masters on free ports):
// the otp-flood lock must not replace or keep out the login lockout there
// either. Defence: a class-restricted rule's lock key, the subject's rule
// set ({account:id}:lr), lock key and trust set share one hash tag, so
// riskd writes the rule's lock in the subject's slot, the decide script
// reads it beside the subject's lock, the admin list shows each lock and
// one lift ends both.
func TestAttackOtpFloodDoesNotLiftLoginLockoutOnCluster(t *testing.T) {
	t.Parallel()
	cl := testenv.StartCluster(t)
	tg := start(t, func(c *service.Config) {
		if err := os.WriteFile(c.ConfigPath, []byte(lockClassPolicy), 0o600); err != nil {
			t.Fatal(err)
		}
		c.RedisURL = "redis+cluster://" + strings.Join(cl.Addrs, ",")
	})
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	t.Cleanup(func() { cc.Close() })
	check := func(endpoint string) (int, string) {
		return do(t, "POST", tg.api+"/v1/check", `{"endpoint":"`+endpoint+`","ip":"198.51.100.41","account":"victim-c"}`, bearer(apiToken))
	}
	locked := func(what, endpoint, rule string) {
		t.Helper()
		if st, body := check(endpoint); st != 429 || code(body) != "ACCOUNT_LOCKED" {
			t.Fatalf("%s: %s: %d %s; want 429 ACCOUNT_LOCKED (rule %s)", what, endpoint, st, body, rule)
		}
	}
	stays := func(what, endpoint, rule string) {
		t.Helper()
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			locked(what, endpoint, rule)
		}
	}

	tg.report(t, 3, `{"type":"login_failed","account":"victim-c","ip":"203.0.113.9"}`)
	tg.syncRisk(t)
	locked("after 3 failed logins", "POST /auth/login", "account-failures")
	tg.report(t, 3, `{"type":"otp_sent","account":"victim-c","ip":"203.0.113.9"}`)
	tg.syncRisk(t)
	stays("after the otp flood", "POST /auth/login", "account-failures")
	locked("after the otp flood", "POST /otp", "otp-flood")

	// riskd wrote both, each under its own key, in the subject's slot
	ctx := context.Background()
	base := bucket.LockKey(tg.prefix, "account", "victim-c")
	own := bucket.RuleLockKey(tg.prefix, "account", "victim-c", "otp-flood")
	if bucket.Slot(base) != bucket.Slot(own) {
		t.Fatalf("slots of %s and %s differ", base, own)
	}
	if v, err := cc.Get(ctx, base).Result(); err != nil || !strings.HasSuffix(v, " account-failures") {
		t.Fatalf("GET %s = %q %v", base, v, err)
	}
	if v, err := cc.Get(ctx, own).Result(); err != nil || !strings.HasSuffix(v, " otp-flood") {
		t.Fatalf("GET %s = %q %v", own, v, err)
	}

	admin := bearer(adminToken)
	if st, body := do(t, "GET", tg.api+"/v1/admin/lockouts", "", admin); st != 200 || strings.Count(body, `"id":"victim-c"`) != 2 ||
		!strings.Contains(body, `"rule":"otp-flood"`) || !strings.Contains(body, `"rule":"account-failures"`) {
		t.Fatalf("lockout list: %d %s; want both locks of victim-c, one entry each", st, body)
	}
	if st, body := do(t, "DELETE", tg.api+"/v1/admin/lockouts/account/victim-c", "", admin); st != 200 || !strings.Contains(body, `"cleared":true`) {
		t.Fatalf("lift: %d %s", st, body)
	}
	eventually(t, 10*time.Second, func() string {
		for _, ep := range []string{"POST /auth/login", "POST /otp"} {
			if st, body := check(ep); st != 200 {
				return ep + " after the lift: " + body
			}
		}
		return ""
	})
	if n, err := cc.Exists(ctx, base, own).Result(); err != nil || n != 0 {
		t.Fatalf("after the lift %d lock keys remain (%v)", n, err)
	}
}
