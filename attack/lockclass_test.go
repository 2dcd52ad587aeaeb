package attack

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/service"
)

// lockClassPolicy is the attack policy with an otp route class, a lockout
// of accounts after failed logins (class auth) and a lockout after an otp
// flood restricted to class otp, longer than the login lockout.
var lockClassPolicy = strings.NewReplacer(
	"  - {match: \"GET /search*\",     class: expensive}\n",
	"  - {match: \"POST /otp\",        class: otp}\n  - {match: \"GET /search*\",     class: expensive}\n",
	`    - {name: account-failures, event: login_failed, by: account, threshold: 10, window: 10m,
       action: lockout, duration: 15m, exempt_attested: true}
`,
	`    - {name: account-failures, event: login_failed, by: account, threshold: 3, window: 10m, action: lockout, duration: 15m}
    - {name: otp-flood, event: otp_sent, by: account, threshold: 3, window: 10m, action: lockout, duration: 1h, classes: [otp]}
`).Replace(attackPolicy)

// Attack: an attacker who got the victim's account locked out of login
// (or who wants to keep it guessing) sends three otp_sent reports for the
// account: the otp-flood lockout, one hour long, replaced the login
// lockout at the account's one lock key, and the engine ignores an otp
// lock on class auth, so login was open again. In the other order, the
// otp lock in force kept the login lockout from being written.
// Defence: the lock of a rule restricted to classes is kept under a key of
// its own, so one class's lock never replaces another's; a decision on a
// class checks the account's lock key and the keys of the class's rules.
func TestAttackOtpFloodDoesNotLiftLoginLockout(t *testing.T) {
	t.Parallel()
	if !strings.Contains(lockClassPolicy, "otp-flood") || !strings.Contains(lockClassPolicy, "POST /otp") {
		t.Fatal("lockClassPolicy: the attack policy changed; fix the replacements")
	}
	tg := start(t, func(c *service.Config) {
		if err := os.WriteFile(c.ConfigPath, []byte(lockClassPolicy), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	check := func(endpoint, account string) (int, string) {
		return do(t, "POST", tg.api+"/v1/check", `{"endpoint":"`+endpoint+`","ip":"198.51.100.40","account":"`+account+`"}`, bearer(apiToken))
	}
	locked := func(what, endpoint, account, rule string) {
		t.Helper()
		st, body := check(endpoint, account)
		if st != 429 || code(body) != "ACCOUNT_LOCKED" {
			t.Fatalf("%s: %s for %s: %d %s; want 429 ACCOUNT_LOCKED (rule %s)", what, endpoint, account, st, body, rule)
		}
	}
	// stays checks for a while past the L1 cache's bound (a cached
	// denial may answer for --l1-ttl) that the lock holds
	stays := func(what, endpoint, account, rule string) {
		t.Helper()
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			locked(what, endpoint, account, rule)
		}
	}
	open := func(what, endpoint, account string) {
		t.Helper()
		if st, body := check(endpoint, account); st != 200 {
			t.Fatalf("%s: %s for %s: %d %s; want 200", what, endpoint, account, st, body)
		}
	}

	// login locked first, then the otp flood
	tg.report(t, 3, `{"type":"login_failed","account":"victim-a","ip":"203.0.113.9"}`)
	tg.syncRisk(t)
	locked("after 3 failed logins", "POST /auth/login", "victim-a", "account-failures")
	tg.report(t, 3, `{"type":"otp_sent","account":"victim-a","ip":"203.0.113.9"}`)
	tg.syncRisk(t)
	stays("after the otp flood", "POST /auth/login", "victim-a", "account-failures")
	locked("after the otp flood", "POST /otp", "victim-a", "otp-flood")

	// otp locked first, then failed logins
	tg.report(t, 3, `{"type":"otp_sent","account":"victim-b","ip":"203.0.113.9"}`)
	tg.syncRisk(t)
	locked("after the otp flood", "POST /otp", "victim-b", "otp-flood")
	open("the otp lock is not a login lock", "POST /auth/login", "victim-b")
	tg.report(t, 3, `{"type":"login_failed","account":"victim-b","ip":"203.0.113.9"}`)
	tg.syncRisk(t)
	stays("after 3 failed logins under an otp lock", "POST /auth/login", "victim-b", "account-failures")
	locked("after 3 failed logins", "POST /otp", "victim-b", "otp-flood")

	// the admin sees both and one lift ends both
	admin := bearer(adminToken)
	st, body := do(t, "GET", tg.api+"/v1/admin/subjects/account/victim-b", "", admin)
	if st != 200 || !strings.Contains(body, `"lockout":{"kind":"lockout","rule":"otp-flood"`) || !strings.Contains(body, `"rule":"account-failures"`) {
		t.Fatalf("subject view: %d %s; want both lockouts, the otp one (longest) as lockout", st, body)
	}
	if st, body := do(t, "GET", tg.api+"/v1/admin/lockouts", "", admin); st != 200 || strings.Count(body, `"id":"victim-b"`) != 2 {
		t.Fatalf("lockout list: %d %s; want both locks of victim-b", st, body)
	}
	if st, body := do(t, "DELETE", tg.api+"/v1/admin/lockouts/account/victim-b", "", admin); st != 200 || !strings.Contains(body, `"cleared":true`) {
		t.Fatalf("lift: %d %s", st, body)
	}
	eventually(t, 10*time.Second, func() string {
		for _, ep := range []string{"POST /auth/login", "POST /otp"} {
			if st, body := check(ep, "victim-b"); st != 200 {
				return ep + " after the lift: " + body
			}
		}
		return ""
	})
}
