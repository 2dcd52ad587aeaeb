package attack

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
)

// Attack: the attacker's device calls itself "alice-phone\u00a0" (alice's
// phone's id and a no-break space) and floods. The operator opens its page
// from the console (a link of the lockouts, offenders or audit pages, or
// the id pasted in the search) and blocks it with a multiplier of 0. The
// console trimmed the id of the page and of the form it posted: the page
// was alice-phone's, and the block fell on alice's own phone (Forget on
// such a page, since this session, would free her id and untrust it in
// every account). Defence: the console keeps ids exactly as given, but for
// the kinds whose ids the API reads with their spaces gone (account, ip,
// asn).
func TestAttackConsoleTrimmedDeviceIDBlocksAnother(t *testing.T) {
	t.Parallel()
	tg := start(t)
	const attackers = "alice-phone\u00a0"
	c := consoleClient(t)
	tg.consoleSignIn(t, c)
	code, _, page := consoleDo(t, c, "GET", tg.api+"/console/subjects?"+url.Values{"subject": {"device"}, "id": {attackers}}.Encode(), nil)
	if code != 200 {
		t.Fatalf("the attacker's device's page: %d %s", code, pageError(page))
	}
	if got := title(page); got != "device alice-phone[U+00A0]" {
		t.Errorf("the page's title %q, want device alice-phone[U+00A0] (not alice's phone's, and the space shown)", got)
	}
	form := postedForm(t, page, "/console/multipliers/set")
	form.Set("multiplier", "0")
	form.Set("ttl", "1h")
	if code, loc, out := consoleDo(t, c, "POST", tg.api+"/console/multipliers/set", form); code != http.StatusSeeOther {
		t.Fatalf("block: %d %s %s", code, loc, out)
	}
	effective := func(id string) float64 {
		t.Helper()
		status, b := do(t, "GET", tg.api+"/v1/admin/subjects/device/"+url.PathEscape(id), "", bearer(adminToken))
		var v struct{ Effective float64 }
		if err := json.Unmarshal([]byte(b), &v); status != 200 || err != nil {
			t.Fatalf("subject view of %q: %d %s", id, status, b)
		}
		return v.Effective
	}
	if got := effective("alice-phone"); got != 1 {
		t.Errorf("alice's own phone's effective multiplier %v after the operator blocked the attacker's device, want 1", got)
	}
	if got := effective(attackers); got != 0 {
		t.Errorf("the attacker's device's effective multiplier %v, want 0 (blocked)", got)
	}
}
