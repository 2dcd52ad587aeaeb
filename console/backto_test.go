package console

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestBackTo: a change returns only to a console page: never to a path
// that http.Redirect's cleaning or a browser's dropping of control
// characters turns into another site's.
func TestBackTo(t *testing.T) {
	t.Parallel()
	for back, want := range map[string]string{
		"/console/lockouts":                         "/console/lockouts",
		"/console/subjects?subject=ip&id=192.0.2.1": "/console/subjects?subject=ip&id=192.0.2.1",
		"/console/../\t/evil.example":               "/console/",
		"/console/../../evil":                       "/console/",
		"/console/..":                               "/console/",
		"/console/../consolex":                      "/console/",
		"/console/\\evil.example":                   "/console/",
		"/console/x\r\nLocation: //evil.example":    "/console/",
		"//evil.example/console/":                   "/console/",
		"https://evil.example/console/":             "/console/",
		"":                                          "/console/",
	} {
		r := httptest.NewRequest("POST", "/console/lockouts/lift", strings.NewReader(url.Values{"back": {back}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if got := backTo(r); got != want {
			t.Errorf("back %q: %q, want %q", back, got, want)
		}
	}
}
