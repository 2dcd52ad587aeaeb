package attack

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
