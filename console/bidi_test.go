package console_test

import (
	stdhtml "html"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestIDsShowTheirFormatCharacters: an attacker picks his account name,
// and one with a right-to-left override (U+202E) or a zero-width space
// rendered as another name in the console: "ceo\u202Emoc.elpmaxe@" reads
// "ceo@example.com" reversed into place. The console shows every format
// character of an id or a reason as [U+XXXX], so the operator sees what
// is there and lifts or blocks the subject he means.
func TestIDsShowTheirFormatCharacters(t *testing.T) {
	t.Parallel()
	base := startLimiter(t, adminToken)
	id := "ceo\u202emoc.elpmaxe@\u200b"
	req, err := http.NewRequest("PUT", base+"/v1/admin/multipliers/account/"+url.PathEscape(id), strings.NewReader(`{"multiplier":0.5,"reason":"seen \u202egnirts"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := newClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("setting the multiplier: %d", resp.StatusCode)
	}
	c := newClient(t)
	signIn(t, c, base)
	for _, page := range []string{"/console/multipliers", "/console/subjects?subject=account&id=" + url.QueryEscape(id)} {
		_, html := do(t, c, "GET", base+page, nil)
		if !strings.Contains(stdhtml.UnescapeString(html), "ceo[U+202E]moc.elpmaxe@[U+200B]") {
			t.Errorf("%s: the id is not shown with its format characters", page)
		}
		// form fields carry the id as it is, to send it back
		shown := strings.ReplaceAll(html, `value="`+id+`"`, "")
		if i := strings.IndexAny(shown, "\u202e\u200b"); i >= 0 {
			t.Errorf("%s: a format character is rendered as is: %q", page, shown[max(i-80, 0):min(i+40, len(shown))])
		}
	}
}
