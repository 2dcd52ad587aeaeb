package policy

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestGlobMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true},
		{"*", "/anything/at/all", true},
		{"/token", "/token", true},
		{"/token", "/token/", false},
		{"/token", "/tokens", false},
		{"/token", "/toke", false},
		{"/search*", "/search", true},
		{"/search*", "/search/users?q=1", true},
		{"/search*", "/searc", false},
		{"/users/*/posts", "/users/42/posts", true},
		{"/users/*/posts", "/users/42/7/posts", true}, // * crosses /
		{"/users/*/posts", "/users/posts", false},
		{"/users/*/posts", "/users//posts", true},
		{"/a*b*c", "/abc", true},
		{"/a*b*c", "/a-b-b-c", true},
		{"/a*b*c", "/a-b-b-cd", false},
		{"/a**b", "/ab", true},
		{"*/x", "/y/x", true},
		{"*.json", "/v1/items.json", true},
		{"*.json", "/v1/items.jsonx", false},
		{"/a?b", "/axb", false}, // no other metacharacters
		{"/a?b", "/a?b", true},
		{"/[ab]", "/[ab]", true},
		{"/[ab]", "/a", false},
		{"", "", true},
		{"", "/", false},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+" "+tt.s, func(t *testing.T) {
			t.Parallel()
			if got := globMatch(tt.pattern, tt.s); got != tt.want {
				t.Errorf("globMatch(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
			}
		})
	}
}

func TestGlobMatchIsNotExponential(t *testing.T) {
	t.Parallel()
	pattern := strings.Repeat("*a", 50) + "b"
	s := strings.Repeat("a", 10000)
	start := time.Now()
	if globMatch(pattern, s) {
		t.Fatal("matched")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestRoute(t *testing.T) {
	t.Parallel()
	p := Default()
	tests := []struct {
		method, path string
		class        string
		match        string // "" for no route
	}{
		{"POST", "/auth/login", "auth", "POST /auth/login"},
		{"GET", "/auth/login", "read", "GET *"},
		{"post", "/auth/login", "auth", "POST /auth/login"}, // methods fold case (7.1)
		{"POST", "/token", "auth", "POST /token"},
		{"POST", "/token/refresh", "write", "* *"},
		{"GET", "/search", "expensive", "GET /search*"},
		{"GET", "/search/users", "expensive", "GET /search*"},
		{"HEAD", "/search", "expensive", "GET /search*"}, // served as GET (7.1)
		{"head", "/", "read", "GET *"},
		{"OPTIONS", "/search", "write", "* *"},
		{"GET", "/", "read", "GET *"},
		{"DELETE", "/users/1", "write", "* *"},
		{"PATCH", "", "write", "* *"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			t.Parallel()
			c, r := p.Route(tt.method, tt.path)
			if got := p.Classes[c]; got != tt.class {
				t.Errorf("class = %q, want %q", got, tt.class)
			}
			if r == nil || r.Match != tt.match || r.ClassIndex != c {
				t.Errorf("route = %+v, want %q", r, tt.match)
			}
		})
	}
}

func TestRouteDefault(t *testing.T) {
	t.Parallel()
	text := `version: 1
routes:
  - {match: "POST /login", class: auth}
  - {match: "GET /api/*/items", class: read}
limits: [{name: a, by: [ip], rate: 1/s}]
`
	p, err := Parse("r.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		method, path, class string
		routed              bool
	}{
		{"POST", "/login", "auth", true},
		{"GET", "/login", "default", false},
		{"GET", "/api/v1/items", "read", true},
		{"GET", "/api/v1/items/1", "default", false},
	}
	for _, tt := range tests {
		c, r := p.Route(tt.method, tt.path)
		if p.Classes[c] != tt.class || (r != nil) != tt.routed {
			t.Errorf("Route(%s %s) = %q, %v; want %q, routed %v", tt.method, tt.path, p.Classes[c], r, tt.class, tt.routed)
		}
	}
	if got := p.ClassIndex(DefaultClass); got != 2 {
		t.Errorf("ClassIndex(default) = %d, want 2", got)
	}

	// Without routes, every request has class default.
	p, err = Parse("r.yaml", []byte("version: 1\nlimits: [{name: a, by: [ip], rate: 1/s}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c, r := p.Route("GET", "/x"); c != 0 || r != nil || p.Classes[0] != DefaultClass {
		t.Errorf("Route without routes = %d, %v", c, r)
	}

	// A route may name class default itself; it is not added twice.
	p, err = Parse("r.yaml", []byte("version: 1\nroutes: [{match: GET /x, class: default}, {match: \"* *\", class: rest}]\nlimits: [{name: a, by: [ip], rate: 1/s}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.Classes, ","); got != "default,rest" {
		t.Errorf("Classes = %s", got)
	}
}

// names lists the limits' names.
func names(ls []*Limit) string {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = l.Name
	}
	return strings.Join(s, ",")
}

func TestApplicable(t *testing.T) {
	t.Parallel()
	p := Default()
	tests := []struct {
		class string
		auth  bool
		want  string
	}{
		{"auth", false, "global,ip-unauth,device,login-ip,login-account"},
		{"auth", true, "global,ip-auth,device,login-ip,login-account"},
		{"expensive", false, "global,ip-unauth,user-read,user-search,device"},
		{"expensive", true, "global,ip-auth,user-read,user-search,device"},
		{"read", true, "global,ip-auth,user-read,device"},
		{"write", true, "global,ip-auth,user-write,device"},
		{"default", false, "global,ip-unauth,device"},
		{"default", true, "global,ip-auth,device"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%v", tt.class, tt.auth), func(t *testing.T) {
			t.Parallel()
			c := p.ClassIndex(tt.class)
			if got := names(p.Applicable(c, tt.auth)); got != tt.want {
				t.Errorf("Applicable = %s, want %s", got, tt.want)
			}
			// A hand-built policy (not indexed) answers the same.
			hand := &Policy{Limits: p.Limits, Classes: p.Classes}
			if got := names(hand.Applicable(c, tt.auth)); got != tt.want {
				t.Errorf("hand-built Applicable = %s, want %s", got, tt.want)
			}
		})
	}
	if got := p.Applicable(-1, false); got != nil {
		t.Errorf("Applicable(-1) = %v", got)
	}
	if got := p.Applicable(len(p.Classes), true); got != nil {
		t.Errorf("Applicable(out of range) = %v", got)
	}
}

func TestFailureModeOf(t *testing.T) {
	t.Parallel()
	text := `version: 1
routes:
  - {match: "POST /login", class: auth}
  - {match: "GET *", class: read}
  - {match: "* *", class: write}
limits:
  - {name: own-open, by: [ip], rate: 1/s, failure_mode: open}
  - {name: own-closed, by: [ip], rate: 1/s, failure_mode: closed}
  - {name: inherit, by: [ip], rate: 1/s}
failure_mode: {default: closed, auth: closed, read: open}
`
	p, err := Parse("f.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		limit, class string
		want         FailureMode
	}{
		{"own-open", "auth", FailOpen},
		{"own-closed", "read", FailClosed},
		{"inherit", "auth", FailClosed},
		{"inherit", "read", FailOpen},
		{"inherit", "write", FailClosed}, // failure_mode.default
		{"inherit", "default", FailClosed},
	}
	for _, tt := range tests {
		l, c := p.LimitByName(tt.limit), p.ClassIndex(tt.class)
		if got := p.FailureModeOf(l, c); got != tt.want {
			t.Errorf("FailureModeOf(%s, %s) = %v, want %v", tt.limit, tt.class, got, tt.want)
		}
		hand := &Policy{Limits: p.Limits, Classes: p.Classes, FailureDefault: p.FailureDefault, FailureByClass: p.FailureByClass}
		if got := hand.FailureModeOf(hand.LimitByName(tt.limit), c); got != tt.want {
			t.Errorf("hand-built FailureModeOf(%s, %s) = %v, want %v", tt.limit, tt.class, got, tt.want)
		}
	}
	// Without a failure_mode section everything fails open.
	d, err := Parse("f.yaml", []byte("version: 1\nlimits: [{name: a, by: [ip], rate: 1/s}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := d.FailureModeOf(&d.Limits[0], 0); got != FailOpen {
		t.Errorf("default failure mode = %v", got)
	}
	if got := Default().FailureModeOf(Default().LimitByName("global"), Default().ClassIndex("auth")); got != FailClosed {
		t.Errorf("example: global on auth = %v, want closed", got)
	}
}

func TestLookups(t *testing.T) {
	t.Parallel()
	p := Default()
	if l := p.LimitByName("login-ip"); l == nil || l != &p.Limits[7] {
		t.Errorf("LimitByName(login-ip) = %p, want %p", l, &p.Limits[7])
	}
	if l := p.LimitByName("nope"); l != nil {
		t.Errorf("LimitByName(nope) = %v", l)
	}
	if got := p.ClassIndex("nope"); got != -1 {
		t.Errorf("ClassIndex(nope) = %d", got)
	}
	if got := p.ClassIndex("read"); got != 2 {
		t.Errorf("ClassIndex(read) = %d", got)
	}
	if got := p.LimitByName("login-ip").PerSecond(); got != 10.0/60 {
		t.Errorf("PerSecond = %v", got)
	}
}

func TestZeroAllocs(t *testing.T) {
	p := Default()
	var sink int
	if n := testing.AllocsPerRun(1000, func() {
		c, r := p.Route("GET", "/search/users/with/a/long/path")
		if r != nil {
			sink += c
		}
		c, _ = p.Route("PUT", "/users/42")
		sink += c
	}); n != 0 {
		t.Errorf("Route allocates %v times per run", n)
	}
	if n := testing.AllocsPerRun(1000, func() {
		sink += len(p.Applicable(1, true)) + len(p.Applicable(4, false))
	}); n != 0 {
		t.Errorf("Applicable allocates %v times per run", n)
	}
	if n := testing.AllocsPerRun(1000, func() {
		l := p.LimitByName("login-ip")
		sink += int(p.FailureModeOf(l, 0)) + p.ClassIndex("write")
	}); n != 0 {
		t.Errorf("lookups allocate %v times per run", n)
	}
	_ = sink
}

func BenchmarkRoute(b *testing.B) {
	p := Default()
	b.ReportAllocs()
	for b.Loop() {
		p.Route("POST", "/v1/orders/12345/items")
	}
}

func BenchmarkApplicable(b *testing.B) {
	p := Default()
	c := p.ClassIndex("expensive")
	b.ReportAllocs()
	for b.Loop() {
		p.Applicable(c, true)
	}
}

func ExamplePolicy_Route() {
	p := Default()
	c, r := p.Route("GET", "/search/users")
	fmt.Println(p.Classes[c], r.Match)
	for _, l := range p.Applicable(c, true) {
		fmt.Println(l.Name, l.RateText, p.FailureModeOf(l, c))
	}
	// Output:
	// expensive GET /search*
	// global 100000/s open
	// ip-auth 600/min open
	// user-read 300/min open
	// user-search 20/min open
	// device 600/min open
}

// TestRouteHeadRouteFirst: a HEAD route before the GET one takes HEAD
// requests apart.
func TestRouteHeadRouteFirst(t *testing.T) {
	t.Parallel()
	p, err := Parse("head.yaml", []byte("version: 1\nroutes:\n  - {match: \"HEAD /x\", class: probe}\n  - {match: \"GET /x\", class: read}\nlimits:\n  - {name: ip, by: [ip], rate: 10/s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for method, want := range map[string]string{"HEAD": "probe", "GET": "read", "POST": DefaultClass} {
		if c, _ := p.Route(method, "/x"); p.Classes[c] != want {
			t.Errorf("%s /x: class %q; want %q", method, p.Classes[c], want)
		}
	}
}
