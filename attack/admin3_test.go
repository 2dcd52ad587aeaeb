package attack

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/reputation/reputationtest"
	"github.com/tollgate-dev/tollgate/service"
)

// TestAttackAdminBlockOfAnUnkeyedSubject: credential stuffing from a
// hosting provider's network, AS64500. The operator blocks the ASN
// (PUT /v1/admin/multipliers/asn/64500, multiplier 0) and the API answers
// 200 with "effective": 0, the console "0 (blocked)". But a multiplier
// weighs only on the limits whose `by` names its subject, and the
// contract's example policy keys none by asn: the block changed no
// decision, and the attack went on while the operator read it as
// stopped. The subject view (the PUT's answer) now warns that no limit
// is keyed by the subject's kind ("warning"), and the console says so.
func TestAttackAdminBlockOfAnUnkeyedSubject(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "asn.mmdb")
	if err := reputationtest.WriteTestDB(db, []reputationtest.TestEntry{{Prefix: netip.MustParsePrefix("198.51.100.0/24"), ASN: 64500, Org: "Hosting"}}); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "policy.yaml")
	text := strings.Replace(attackPolicy, "  attestation:\n", "  reputation: {asn_database: "+db+"}\n  attestation:\n", 1)
	if err := os.WriteFile(pol, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	tg := start(t, func(c *service.Config) { c.ConfigPath = pol })
	code, body := do(t, "PUT", tg.api+"/v1/admin/multipliers/asn/AS64500", `{"multiplier":0,"reason":"credential stuffing"}`, bearer(adminToken))
	if code != 200 {
		t.Fatalf("block: %d %s", code, body)
	}
	var view struct {
		Effective float64 `json:"effective"`
		Warning   string  `json:"warning"`
	}
	if err := json.Unmarshal([]byte(body), &view); err != nil {
		t.Fatal(err)
	}
	code, _ = do(t, "GET", tg.public+"/items", "", from("198.51.100.7"))
	blocked := code == 429
	if !blocked && !strings.Contains(view.Warning, "no limit of the policy in force is keyed by asn") {
		t.Fatalf("the block of AS64500 answered %s, yet a request from the ASN is answered %d: the answer does not say that no limit weighs it", body, code)
	}
	c := consoleClient(t)
	tg.consoleSignIn(t, c)
	_, _, page := consoleDo(t, c, "GET", tg.api+"/console/subjects?subject=asn&id=64500", nil)
	if !blocked && !strings.Contains(page, "no limit of the policy in force is keyed by asn") {
		t.Fatalf("the console's page of asn 64500 does not say the block weighs on no limit:\n%s", page)
	}
}

// TestAttackAdminPathRedirectLiftsABlock: the operator has blocked the
// attacker's address. The attacker then fails logins as the account
// "../multipliers/ip/203.0.113.9" until it is locked. A clean-up job (Go's
// http.Client, as scripts use it) lifts stale lockouts by DELETE
// /v1/admin/lockouts/ + the listed id, unescaped. The admin API's router
// answered that path with a 307 to its cleaned form,
// /v1/admin/multipliers/ip/203.0.113.9, and the client followed it with
// the same method and the same token: the job cleared the block. An admin
// path that is not in its clean form (a dot segment, an empty segment) is
// refused now, never redirected.
func TestAttackAdminPathRedirectLiftsABlock(t *testing.T) {
	t.Parallel()
	tg := start(t)
	const attacker, account = "203.0.113.9", "../multipliers/ip/203.0.113.9"
	if code, body := do(t, "PUT", tg.api+"/v1/admin/multipliers/ip/"+attacker, `{"multiplier":0,"reason":"stuffing"}`, bearer(adminToken)); code != 200 {
		t.Fatalf("block: %d %s", code, body)
	}
	for range 10 {
		if code, body := do(t, "POST", tg.api+"/v1/report", `{"type":"login_failed","account":"`+account+`"}`, bearer(apiToken)); code != 202 {
			t.Fatalf("report: %d %s", code, body)
		}
	}
	eventually(t, 15*time.Second, func() string {
		if ids := tg.lockouts(t); len(ids) != 1 || ids[0] != account {
			return "lockouts " + strings.Join(ids, ",")
		}
		return ""
	})
	for _, id := range tg.lockouts(t) { // the clean-up job, which does not escape ids
		code, body := do(t, "DELETE", tg.api+"/v1/admin/lockouts/"+id, "", bearer(adminToken))
		t.Logf("DELETE /v1/admin/lockouts/%s: %d %s", id, code, body)
	}
	_, body := do(t, "GET", tg.api+"/v1/admin/subjects/ip/"+attacker, "", bearer(adminToken))
	if !strings.Contains(body, `"effective":0,`) {
		t.Fatalf("the block of %s after the clean-up job: %s", attacker, body)
	}
	code, _ := do(t, "GET", tg.api+"/v1/admin/lockouts/../multipliers", "", nil)
	if code != 401 {
		t.Errorf("an unclean admin path without the token: %d, want 401 (the admin checks first)", code)
	}
}
