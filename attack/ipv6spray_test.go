package attack

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// withIPSprayPolicy adds docs/policy.md's ip-spray rule to the attack
// policy: 50 failed logins from one ip in 10 minutes lock it out.
var withIPSprayPolicy = insertAfter("  velocity:",
	"    - {name: ip-spray, event: login_failed, by: ip, threshold: 50, window: 10m, action: lockout, duration: 15m}\n")

// Attack: a password sprayer holds an IPv6 /64, as any subscriber does,
// and sends each failed login from a fresh address of it. The ip-spray
// rule (by: ip, threshold 50) counted whole addresses: each address failed
// once, none ever reached 50, and the /64 sprayed on without end.
// Defence (7.1): velocity rules by ip count and lock an IPv6 client by its
// identity.ipv6_prefix (default /64), the id its buckets use; the limiter
// checks the ip lock under that id, and the admin API lists, views and
// lifts it by any address of the prefix.
func TestAttackIPv6SprayWithinPrefixLockedOut(t *testing.T) {
	t.Parallel()
	tg := start(t, withPolicy(t, withIPSprayPolicy))
	for i := 1; i <= 50; i++ {
		tg.report(t, 1, `{"type":"login_failed","ip":"2001:db8:5:6::`+strconv.FormatInt(int64(i), 16)+`"}`)
	}
	tg.syncRisk(t)
	st, body := do(t, "POST", tg.public+"/auth/login", `{"username":"victim51","password":"guess"}`, from("2001:db8:5:6:ffff::51"))
	if st != 429 || code(body) != "ACCOUNT_LOCKED" || !strings.Contains(body, `"scope":"ip"`) {
		t.Fatalf("a guess from a 51st address of the /64: %d %s; want 429 ACCOUNT_LOCKED scope ip", st, body)
	}
	if n := tg.up.attemptsOn("victim51"); n != 0 {
		t.Errorf("%d guesses from the locked /64 reached the upstream", n)
	}
	if st, body := do(t, "POST", tg.public+"/auth/login", `{"username":"office","password":"right"}`, from("2001:db8:5:7::1")); st != 200 {
		t.Fatalf("a login from the next /64: %d %s; want 200 (not locked)", st, body)
	}
	admin := bearer(adminToken)
	if st, body := do(t, "GET", tg.api+"/v1/admin/lockouts", "", admin); st != 200 ||
		!strings.Contains(body, `"subject":"ip","id":"2001:db8:5:6::/64","kind":"lockout","rule":"ip-spray"`) {
		t.Errorf("lockouts: %d %s; want the /64 locked by ip-spray", st, body)
	}
	if st, body := do(t, "GET", tg.api+"/v1/admin/subjects/ip/2001:db8:5:6::abcd", "", admin); st != 200 ||
		!strings.Contains(body, `"id":"2001:db8:5:6::/64"`) || !strings.Contains(body, `"lockout":{"kind":"lockout","rule":"ip-spray"`) {
		t.Errorf("subject view of an address of the /64: %d %s; want the prefix's lockout", st, body)
	}
	if st, body := do(t, "DELETE", tg.api+"/v1/admin/lockouts/ip/2001:db8:5:6::abcd", "", admin); st != 200 ||
		!strings.Contains(body, `"cleared":true,"id":"2001:db8:5:6::/64"`) {
		t.Fatalf("lift by an address of the /64: %d %s; want the prefix cleared", st, body)
	}
	eventually(t, 10*time.Second, func() string {
		if st, body := do(t, "POST", tg.public+"/auth/login", `{"username":"office","password":"right"}`, from("2001:db8:5:6:ffff::51")); st != 200 {
			return "login from the lifted /64: " + body
		}
		return ""
	})
}
