package console_test

import (
	"fmt"
	"html"
	"regexp"
	"strings"
	"testing"
)

var tileRE = regexp.MustCompile(`<span class="big">([^<]*)</span><span>multipliers in force</span>`)

// TestOverviewSaysWhenThereAreMore: the overview counted the lockouts and
// multipliers in force as the length of a list it asked for at most 200
// of, so an attack that had 5,000 accounts locked showed as "200": the
// scale of the wave hidden behind the page's own bound. The tile says
// "200+" when there are more.
func TestOverviewSaysWhenThereAreMore(t *testing.T) {
	t.Parallel()
	base := startLimiter(t, adminToken)
	for i := range 201 {
		admin(t, "PUT", fmt.Sprintf("%s/v1/admin/multipliers/user/u-%d", base, i), `{"multiplier":0.5}`, nil)
	}
	c := newClient(t)
	signIn(t, c, base)
	_, page := do(t, c, "GET", base+"/console/", nil)
	m := tileRE.FindStringSubmatch(page)
	if m == nil || html.UnescapeString(m[1]) != "200+" {
		t.Fatalf("multipliers tile with 201 in force: %q, want 200+", m)
	}
}

// TestListPagesSayWhenThereAreMore: the multipliers page (and the
// lockouts, audit and alerts pages) lists at most 200 entries; with more
// in force it listed 200 as if they were all. It says that there are
// more now.
func TestListPagesSayWhenThereAreMore(t *testing.T) {
	t.Parallel()
	base := startLimiter(t, adminToken)
	c := newClient(t)
	signIn(t, c, base)
	if _, page := do(t, c, "GET", base+"/console/multipliers", nil); strings.Contains(page, "there are more") {
		t.Fatal("the empty multipliers page says there are more")
	}
	for i := range 201 {
		admin(t, "PUT", fmt.Sprintf("%s/v1/admin/multipliers/user/u-%d", base, i), `{"multiplier":0.5}`, nil)
	}
	_, page := do(t, c, "GET", base+"/console/multipliers", nil)
	if n := strings.Count(page, `action="/console/multipliers/clear"`); n != 200 || !strings.Contains(page, "Only the newest 200 are shown; there are more.") {
		t.Fatalf("multipliers page with 201 in force: %d rows, no word of more", n)
	}
}
