package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestLiftLockoutOfAnIPv6Prefix (7.1): failed logins from three addresses
// of one /64 lock the /64 (a `by: ip` rule counts an IPv6 client by its
// identity.ipv6_prefix); the lockouts page and the alert name the prefix,
// and the console's lift of that row lifts it, audited as the prefix.
func TestLiftLockoutOfAnIPv6Prefix(t *testing.T) {
	t.Parallel()
	base := startPolicy(t, adminToken, ipLockPolicy())
	const prefix = "2001:db8:44:1::/64"
	for _, ip := range []string{"2001:db8:44:1::1", "2001:db8:44:1::2", "2001:db8:44:1:abcd::3"} {
		resp, err := http.Post(base+"/v1/report", "application/json", strings.NewReader(`{"type":"login_failed","ip":"`+ip+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	waitFor(t, func() string {
		for _, e := range list(t, base, "/v1/admin/lockouts") {
			if e.Subject == "ip" && e.ID == prefix {
				return ""
			}
		}
		return "no lockout of ip " + prefix + " listed"
	})
	c := newClient(t)
	csrf := signIn(t, c, base)
	if _, page := do(t, c, "GET", base+"/console/lockouts", nil); !strings.Contains(page, `data-subject="ip" data-id="`+prefix+`"`) {
		t.Fatalf("lockouts page lacks the prefix: %s", page)
	}
	waitFor(t, func() string {
		if _, page := do(t, c, "GET", base+"/console/alerts", nil); !strings.Contains(page, "ip <b>"+prefix+"</b>") {
			return "alerts page lacks the prefix"
		}
		return ""
	})
	resp, _ := do(t, c, "POST", base+"/console/lockouts/lift", url.Values{"csrf": {csrf}, "subject": {"ip"}, "id": {prefix}, "back": {"/console/lockouts"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("lift: %d", resp.StatusCode)
	}
	if _, page := do(t, c, "GET", base+"/console/lockouts", nil); !strings.Contains(page, "Lifted the lockout of ip "+prefix+".") || strings.Contains(page, `data-id="`+prefix+`"`) {
		t.Fatalf("after lift: %s", page)
	}
	if au := list(t, base, "/v1/admin/audit"); len(au) != 1 || au[0].Action != "lockout_lift" || au[0].Subject != "ip" || au[0].ID != prefix {
		t.Fatalf("audit = %+v", au)
	}
}
