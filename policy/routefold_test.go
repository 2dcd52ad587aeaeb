package policy

import (
	"strings"
	"testing"
)

func TestFoldRoutePath(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"/auth/login", "/auth/login"},
		{"/AUTH/Login", "/AUTH/Login"}, // case is folded by matching, not here
		{"/auth/login;jsessionid=1", "/auth/login"},
		{"/auth;x=1/login", "/auth/login"},
		{"/auth/login/..;/login", "/auth/login"},
		{"/auth/x/..;foo=bar/login", "/auth/login"},
		{"/auth/login#frag", "/auth/login"},
		{"/auth/login#/../../admin", "/auth/login"},
		{`/auth\login`, "/auth/login"},
		{`\auth\login\`, "/auth/login"},
		{"/auth//login/", "/auth/login"},
		{"/auth/./login", "/auth/login"},
		{"/auth/.well-known", "/auth/.well-known"},
		{"/auth/login.json", "/auth/login.json"}, // matching tries both
		{"/", "/"},
		{"", "/"},
		{";x", "/"},
		{"/..;/..;/auth/login", "/auth/login"},
	} {
		if got := FoldRoutePath(c.in); got != c.want {
			t.Errorf("FoldRoutePath(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestFormatSuffix(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want int
	}{
		{"/auth/login.json", 11}, {"/auth/login.JSON", 11}, {"/auth/login.xml", 11}, {"/a.b.json", 2},
		{"/auth/login", -1}, {"/auth/.json", -1}, {"/auth/login.", 11}, {"/auth/login.toolongext", 11},
		{"/auth/login.js-on", 11}, {"/auth/login.json.bak", 11}, {"/v1.2/login", -1}, {".json", -1}, {"/.well-known", -1},
	} {
		if got := formatSuffix(c.in); got != c.want {
			t.Errorf("formatSuffix(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

// TestRouteSpellings: every spelling some upstream serves as the login
// route is matched as it (7.1); routes written for a suffix keep it.
func TestRouteSpellings(t *testing.T) {
	t.Parallel()
	p, err := Parse("r.yaml", []byte(`version: 1
routes:
  - {match: "GET /config.json", class: static}
  - {match: "POST /auth/login", class: auth}
  - {match: "GET /Reports/*", class: expensive}
  - {match: "GET /search*", class: expensive}
  - {match: "POST /token", class: auth}
  - {match: "* *", class: write}
limits: [{name: a, by: [ip], rate: 1/s}]
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ method, path, match string }{
		{"POST", "/auth/login", "POST /auth/login"},
		{"POST", "/AUTH/login", "POST /auth/login"},
		{"POST", "/Auth/LOGIN", "POST /auth/login"},
		{"post", "/auth/login", "POST /auth/login"},
		{"Post", "/auth/login", "POST /auth/login"},
		{"POST", "/auth/login;jsessionid=1", "POST /auth/login"},
		{"POST", "/auth/login/..;/login", "POST /auth/login"},
		{"POST", "/auth/login.json", "POST /auth/login"},
		{"POST", "/auth/login.XML", "POST /auth/login"},
		{"POST", `/auth\login`, "POST /auth/login"},
		{"POST", "/auth/login#x", "POST /auth/login"},
		{"POST", "/AUTH/Login.json;x=1#y", "POST /auth/login"},
		{"POST", "/auth/log\u0130n", "POST /auth/login"}, // İ lower-cases to i
		{"POST", "/AUTH/LOG\u0131N", "POST /auth/login"}, // ı upper-cases to I
		{"GET", "/\u017fearch", "GET /search*"},          // ſ upper-cases to S
		{"POST", "/to\u212aen", "POST /token"},           // the Kelvin sign lower-cases to k
		{"POST", "/auth/log\u00ecn", "* *"},              // ì is no i
		{"POST", "/auth/log\u0130\u0130n", "* *"},
		{"POST", "/auth/logins", "* *"},
		{"POST", "/auth/login.json.bak", "POST /auth/login"}, // Spring's suffix pattern: "/auth/login.*"
		{"POST", "/auth/login.", "POST /auth/login"},
		{"POST", "/auth/.login", "* *"},
		{"GET", "/config.json", "GET /config.json"},
		{"GET", "/CONFIG.json", "GET /config.json"},
		{"GET", "/reports/q3", "GET /Reports/*"},
		{"GET", "/auth/login", "* *"},
	} {
		_, r := p.Route(c.method, c.path)
		if r == nil || r.Match != c.match {
			t.Errorf("Route(%s %s) = %+v, want %q", c.method, c.path, r, c.match)
		}
	}
}

// TestRouteFoldZeroAllocs: folding case and trying a format suffix cost
// no allocation (not parallel: AllocsPerRun).
func TestRouteFoldZeroAllocs(t *testing.T) {
	p := Default()
	if n := testing.AllocsPerRun(100, func() { p.Route("post", "/AUTH/Login.json") }); n != 0 {
		t.Errorf("Route of a clean path allocates %v times", n)
	}
}

// TestRoutePatternFolded: a route pattern is folded as request paths are,
// so a pattern written with a trailing slash, "//" or "/./" matches the
// paths it names; one whose glob folding would drop is refused with its
// line.
func TestRoutePatternFolded(t *testing.T) {
	t.Parallel()
	for _, pattern := range []string{"/auth/login/", "/auth//login", "/auth/./login", `/auth\login`, "/auth/x/../login"} {
		p, err := Parse("r.yaml", []byte(`version: 1
routes:
  - {match: "POST `+strings.ReplaceAll(pattern, `\`, `\\`)+`", class: auth}
limits: [{name: a, by: [ip], rate: 1/s, if: {class: auth}}]
`))
		if err != nil {
			t.Fatalf("%s: %v", pattern, err)
		}
		for _, path := range []string{"/auth/login", "/auth/login/", "/AUTH//login"} {
			if _, r := p.Route("POST", path); r == nil || r.Match != "POST /auth/login" {
				t.Errorf("pattern %q: Route(POST %s) = %+v, want POST /auth/login", pattern, path, r)
			}
		}
	}
	for _, c := range []struct{ pattern, wantErr string }{
		{"/auth/*/../login", `r.yaml:3: match "POST /auth/*/../login": path folds to "/auth/login", which drops a *; write the path requests are matched as`},
		{"/auth;*", `r.yaml:3: match "POST /auth;*": path folds to "/auth", which drops a *; write the path requests are matched as`},
	} {
		_, err := Parse("r.yaml", []byte(`version: 1
routes:
  - {match: "POST `+c.pattern+`", class: auth}
limits: [{name: a, by: [ip], rate: 1/s}]
`))
		if err == nil || err.Error() != c.wantErr {
			t.Errorf("pattern %q: err = %v, want %s", c.pattern, err, c.wantErr)
		}
	}
}
