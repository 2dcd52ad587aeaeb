package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestLiftLockoutOfAnIP lifts a lockout of another kind than account
// (7.1): an IP locked by a `by: ip` velocity rule is listed, and the
// console's lift is DELETE /v1/admin/lockouts/ip/{id}: gone and audited.
func TestLiftLockoutOfAnIP(t *testing.T) {
	t.Parallel()
	base := startPolicy(t, adminToken, ipLockPolicy())
	for range 3 {
		resp, err := http.Post(base+"/v1/report", "application/json", strings.NewReader(`{"type":"login_failed","ip":"198.51.100.44"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	waitFor(t, func() string {
		for _, e := range list(t, base, "/v1/admin/lockouts") {
			if e.Subject == "ip" && e.ID == "198.51.100.44" {
				return ""
			}
		}
		return "no lockout of ip 198.51.100.44 listed"
	})
	c := newClient(t)
	csrf := signIn(t, c, base)
	if _, page := do(t, c, "GET", base+"/console/lockouts", nil); !strings.Contains(page, `data-subject="ip" data-id="198.51.100.44"`) {
		t.Fatalf("lockouts page lacks the ip: %s", page)
	}
	resp, _ := do(t, c, "POST", base+"/console/lockouts/lift", url.Values{"csrf": {csrf}, "subject": {"ip"}, "id": {"198.51.100.44"}, "back": {"/console/lockouts"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("lift: %d", resp.StatusCode)
	}
	if _, page := do(t, c, "GET", base+"/console/lockouts", nil); !strings.Contains(page, "Lifted the lockout of ip 198.51.100.44.") || strings.Contains(page, `data-id="198.51.100.44"`) {
		t.Fatalf("after lift: %s", page)
	}
	if au := list(t, base, "/v1/admin/audit"); len(au) != 1 || au[0].Action != "lockout_lift" || au[0].Subject != "ip" || au[0].ID != "198.51.100.44" {
		t.Fatalf("audit = %+v", au)
	}
}

// TestAttributeSubjects: the console names attribute subjects (7.4) as
// the admin API does: a multiplier set on attr:phone_prefix 4479 from the
// multipliers form (kind attr:, attribute phone_prefix) is listed and in
// the subject's view, is cleared from that view, and a bad attribute
// name is refused with a message, not sent.
func TestAttributeSubjects(t *testing.T) {
	t.Parallel()
	base := startLimiter(t, adminToken)
	c := newClient(t)
	csrf := signIn(t, c, base)
	set := url.Values{"csrf": {csrf}, "back": {"/console/multipliers"}, "subject": {"attr:"}, "attr": {"phone_prefix"},
		"id": {"4479"}, "multiplier": {"0.05"}, "reason": {"sms pumping"}}
	if resp, _ := do(t, c, "POST", base+"/console/multipliers/set", set); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("set: %d", resp.StatusCode)
	}
	if _, page := do(t, c, "GET", base+"/console/multipliers", nil); !strings.Contains(page, "Set multiplier 0.05 on attr:phone_prefix 4479.") {
		t.Fatalf("multipliers page: %s", page)
	}
	if ms := list(t, base, "/v1/admin/multipliers"); len(ms) != 1 || ms[0].Subject != "attr:phone_prefix" || ms[0].ID != "4479" {
		t.Fatalf("admin multipliers = %+v", ms)
	}
	_, page := do(t, c, "GET", base+"/console/subjects?subject=attr%3A&attr=phone_prefix&id=4479", nil)
	if !strings.Contains(page, "sms pumping") || !strings.Contains(page, `name="subject" value="attr:phone_prefix"`) {
		t.Fatalf("subject page: %s", page)
	}
	clear := url.Values{"csrf": {csrf}, "back": {"/console/subjects?subject=attr:phone_prefix&id=4479"}, "subject": {"attr:phone_prefix"}, "id": {"4479"}}
	if resp, _ := do(t, c, "POST", base+"/console/multipliers/clear", clear); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("clear: %d", resp.StatusCode)
	}
	if _, page := do(t, c, "GET", base+"/console/subjects?subject=attr:phone_prefix&id=4479", nil); !strings.Contains(page, "Cleared the admin multiplier of attr:phone_prefix 4479.") {
		t.Fatalf("after clear: %s", page)
	}
	if ms := list(t, base, "/v1/admin/multipliers"); len(ms) != 0 {
		t.Fatalf("admin multipliers after clear = %+v", ms)
	}
	bad := with(set, "attr", "Phone-Prefix")
	do(t, c, "POST", base+"/console/multipliers/set", bad)
	if _, page := do(t, c, "GET", base+"/console/multipliers", nil); !strings.Contains(page, "for attr:, the attribute&#39;s name") {
		t.Fatalf("bad attribute name: %s", page)
	}
	if ms := list(t, base, "/v1/admin/multipliers"); len(ms) != 0 {
		t.Fatalf("a bad name was sent: %+v", ms)
	}
}
