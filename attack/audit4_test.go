package attack

import (
	"encoding/json"
	"testing"
	"time"
)

// TestAttackAuditNamesOnlyTheBalancer: an insider holding the admin token
// (or one who stole it) lifts a lockout and unblocks an address through
// the load balancer, the only way to the API listener. Every audit event
// named the balancer's address (remote_addr, the peer), not the client
// behind it that the throttle and the proxy rules identify, so the trail
// could not say who made the change. The event names the client too now
// (client_ip), as the trusted-proxy rules read it, and a forged
// X-Forwarded-For from an untrusted peer is not believed.
func TestAttackAuditNamesOnlyTheBalancer(t *testing.T) {
	t.Parallel()
	tg := start(t)
	h := from("198.51.100.23", "Authorization", "Bearer "+adminToken) // relayed by the balancer on loopback
	if code, body := do(t, "PUT", tg.api+"/v1/admin/multipliers/ip/203.0.113.9", `{"multiplier":5,"reason":"ticket 1"}`, h); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	if code, body := do(t, "DELETE", tg.api+"/v1/admin/lockouts/ceo@example.com", "", h); code != 200 {
		t.Fatalf("lift: %d %s", code, body)
	}
	var trail []struct {
		Action     string `json:"action"`
		RemoteAddr string `json:"remote_addr"`
		ClientIP   string `json:"client_ip"`
	}
	eventually(t, 10*time.Second, func() string {
		code, body := do(t, "GET", tg.api+"/v1/admin/audit", "", bearer(adminToken))
		if code != 200 {
			return body
		}
		if err := json.Unmarshal([]byte(body), &trail); err != nil {
			t.Fatal(err)
		}
		if len(trail) != 2 {
			return "audit: " + body
		}
		return ""
	})
	for _, a := range trail {
		if a.ClientIP != "198.51.100.23" {
			t.Errorf("%s audited from %q (client %q): the trail does not name the client behind the balancer", a.Action, a.RemoteAddr, a.ClientIP)
		}
	}
}
