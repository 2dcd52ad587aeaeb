package attack

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/tollgate-dev/tollgate/service"
)

// withSearchLimit adds the contract's search limit to the attack policy.
var withSearchLimit = insertAfter("name: user-read,",
	"  - {name: user-search,   by: [user],            rate: 20/min,  if: {class: expensive}}\n")

// rackUpstream is an upstream that serves a POST as the method its
// override names, as Rack::MethodOverride (Rails, Sinatra), Symfony and
// Laravel, Express's method-override and ASP.NET's
// UseHttpMethodOverride do: the X-HTTP-Method-Override header, else the
// _method field of the form body or the query string. It serves HEAD as
// GET, as Rails and Go's ServeMux do. It records the searches it served.
type rackUpstream struct {
	srv      *httptest.Server
	mu       sync.Mutex
	searches int
}

func newRackUpstream(t *testing.T) *rackUpstream {
	u := &rackUpstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method := r.Method
		if method == http.MethodPost {
			if err := r.ParseMultipartForm(1 << 20); err != nil && err != http.ErrNotMultipart {
				http.Error(w, err.Error(), http.StatusBadRequest) // a body cut short is no request
				return
			}
			if o := overrideOf(r); o != "" {
				method = strings.ToUpper(o)
			}
		}
		if (method == http.MethodGet || method == http.MethodHead) && strings.HasPrefix(r.URL.Path, "/search") {
			u.mu.Lock()
			u.searches++
			u.mu.Unlock()
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// overrideOf returns the method a request's override names, read as
// leniently as some framework reads it: any of the three headers in any
// spelling (CGI turns '-' and '_' alike), the form body's _method, or the
// query's, split at ";" as Rack 2 splits it.
func overrideOf(r *http.Request) string {
	for k, vs := range r.Header {
		switch strings.ToLower(strings.ReplaceAll(k, "_", "-")) {
		case "x-http-method-override", "x-http-method", "x-method-override":
			return vs[0]
		}
	}
	if o := r.PostFormValue("_method"); o != "" {
		return o
	}
	q, _ := url.ParseQuery(strings.ReplaceAll(r.URL.RawQuery, ";", "&"))
	return q.Get("_method")
}

func (u *rackUpstream) served() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.searches
}

// withUpstream points the limiter at upstream instead of the default one.
func withUpstream(url string) setup {
	return func(c *service.Config) { c.Upstream = url }
}

// Attack: a user limited to 20 searches a minute (user-search, GET
// /search*) sends them as POST /search with a method override, which the
// upstream serves as the GET search; the limiter routed them as POST, the
// write class, under user-write's 60 a minute. Each spelling of the
// override got 30 of 30 searches served.
// Defence (7.1): a method override naming a method that routes otherwise
// than the request's own is refused (400): the X-HTTP-Method-Override,
// X-HTTP-Method and X-Method-Override headers in any spelling, and a
// _method field in the query string or a POST's form body, however long
// the body. An override that routes the same way passes.
func TestAttackMethodOverrideEvadesRoute(t *testing.T) {
	t.Parallel()
	up := newRackUpstream(t)
	tg := start(t, withPolicy(t, withSearchLimit), withUpstream(up.srv.URL))
	padding := "pad=" + strings.Repeat("x", 100<<10) + "&"
	for i, c := range []struct {
		name, uri, contentType, body string
		header                       http.Header
	}{
		{"header", "/search?q=x", "", "", http.Header{"X-Http-Method-Override": {"GET"}}},
		{"header in another spelling", "/search?q=x", "", "", http.Header{"X_http_method_override": {"get"}}},
		{"X-HTTP-Method", "/search?q=x", "", "", http.Header{"X-Http-Method": {"GET"}}},
		{"query", "/search?q=x&_method=GET", "", "", nil},
		{"query after a ;", "/search?q=x;_method=GET", "", "", nil},
		{"form body", "/search", "application/x-www-form-urlencoded", "q=x&_method=GET", nil},
		{"form body after 100 KiB", "/search", "application/x-www-form-urlencoded", padding + "_method=GET", nil},
		{"multipart body", "/search", "multipart/form-data; boundary=b",
			"--b\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nGET\r\n--b--\r\n", nil},
		{"multipart body after 100 KiB", "/search", "multipart/form-data; boundary=b",
			"--b\r\nContent-Disposition: form-data; name=\"pad\"\r\n\r\n" + strings.Repeat("x", 100<<10) +
				"\r\n--b\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nGET\r\n--b--\r\n", nil},
	} {
		user := fmt.Sprintf("mallory-override-%d", i)
		before := up.served()
		for range 30 {
			h := from("198.51.100.60", "X-User-Id", user, "X-User-Signature", sign(user))
			for k, v := range c.header {
				h[k] = v
			}
			if c.contentType != "" {
				h.Set("Content-Type", c.contentType)
			}
			do(t, "POST", tg.public+c.uri, c.body, h)
		}
		if n := up.served() - before; n > 20 {
			t.Errorf("%s: %d of 30 searches sent as overridden POSTs were served; want at most 20 (user-search, 20/min)", c.name, n)
		}
	}
	// an override that routes as the request does is the client's to send
	h := from("198.51.100.61", "X-User-Id", "alice", "X-User-Signature", sign("alice"), "Content-Type", "application/x-www-form-urlencoded")
	if code, body := do(t, "POST", tg.public+"/items/1", "_method=PATCH&name=a", h); code != http.StatusOK {
		t.Errorf("POST /items/1 with _method=PATCH (both the write class): %d %.160s; want 200", code, body)
	}
}

// Attack: HEAD /search runs the search (Rails routes HEAD to the GET
// action, Go's ServeMux serves HEAD with the GET pattern), but the
// limiter matched the route by method: HEAD fell through "GET
// /search*" to "* *", the write class, and user-search never counted it.
// Defence (7.1): a route of method GET matches HEAD too.
func TestAttackHeadEvadesGetRoute(t *testing.T) {
	t.Parallel()
	up := newRackUpstream(t)
	tg := start(t, withPolicy(t, withSearchLimit), withUpstream(up.srv.URL))
	for range 30 {
		do(t, "HEAD", tg.public+"/search?q=x", "", from("198.51.100.62", "X-User-Id", "mallory-head", "X-User-Signature", sign("mallory-head")))
	}
	if n := up.served(); n != 20 {
		t.Errorf("%d of 30 HEAD searches of one user were served; want 20 (user-search, 20/min)", n)
	}
}

// Attack: a legacy PHP upstream (Symfony before 2018's CVE-2018-14773
// fix, Zend Framework 1 and 2, IIS's URL Rewrite in front of them) takes
// the request's path from the X-Original-URL or X-Rewrite-URL header.
// The attacker sends each login guess as POST /about with X-Original-URL:
// /auth/login: the limiter routed /about, the write class, and neither
// login-ip nor login-account counted the 20 guesses the upstream served
// as logins.
// Defence (7.1): such a header naming a path routed otherwise than the
// request's own is refused (400), as a method override is.
func TestAttackOriginalURLHeaderEvadesRoute(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	logins := 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		for _, h := range []string{"X-Original-Url", "X-Rewrite-Url"} {
			if v := r.Header.Get(h); v != "" {
				p = v
			}
		}
		if r.Method == http.MethodPost && strings.HasPrefix(p, "/auth/login") {
			mu.Lock()
			logins++
			mu.Unlock()
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	t.Cleanup(up.Close)
	tg := start(t, withUpstream(up.URL))
	for i, h := range []string{"X-Original-URL", "X-Rewrite-URL"} {
		for j := range 10 {
			do(t, "POST", tg.public+"/about", `{"username":"victim-original-url","password":"guess"}`,
				from(fmt.Sprintf("198.18.33.%d", 10*i+j+1), h, "/auth/login", "Content-Type", "application/json"))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if logins > 5 {
		t.Errorf("the upstream served %d of 20 guesses sent to /about with X-Original-URL or X-Rewrite-URL as logins; want at most 5 (login-account)", logins)
	}
	if code, body := do(t, "POST", tg.public+"/about", "", from("198.18.33.99", "X-Original-URL", "/about?x=1")); code != http.StatusOK {
		t.Errorf("X-Original-URL naming the request's own route: %d %.160s; want 200", code, body)
	}
}
