package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestSetMultiplierUnderflow: the console read the form's multiplier with
// strconv.ParseFloat, which takes "1e-999" as 0, and set the multiplier 0:
// asked to tighten, it blocked the subject ("Set multiplier 0 on ip ...").
// It refuses the number now and sets nothing.
func TestSetMultiplierUnderflow(t *testing.T) {
	t.Parallel()
	base := startLimiter(t, adminToken)
	c := newClient(t)
	csrf := signIn(t, c, base)
	for _, lit := range []string{"1e-999", "-1e-999", "0x1p-2000"} {
		resp, body := do(t, c, "POST", base+"/console/multipliers/set", url.Values{"csrf": {csrf}, "subject": {"ip"}, "id": {"192.0.2.80"},
			"multiplier": {lit}, "back": {"/console/multipliers"}})
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("%s: %d %s", lit, resp.StatusCode, body)
		}
		if _, page := do(t, c, "GET", base+"/console/multipliers", nil); !strings.Contains(page, "too small") {
			t.Errorf("%s: no refusal shown on the page", lit)
		}
	}
	if ms := list(t, base, "/v1/admin/multipliers"); len(ms) != 0 {
		t.Fatalf("multipliers after the refused sets: %+v", ms)
	}
}
