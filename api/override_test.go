package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/policy"
)

const overridePolicy = `version: 1
identity:
  trusted_proxies: [10.0.0.0/8]
  account_body_field: username
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "GET /search*", class: expensive}
  - {match: "GET *", class: read}
  - {match: "* *", class: write}
limits:
  - {name: ip, by: [ip], rate: 1000/min}
`

func overridePol(t *testing.T) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("override.yaml", []byte(overridePolicy))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckOverride(t *testing.T) {
	t.Parallel()
	pol := overridePol(t)
	for _, c := range []struct {
		method, uri string
		header      http.Header
		want        string // "" for none
	}{
		{"POST", "/search", nil, ""},
		{"POST", "/search", http.Header{"X-Http-Method-Override": {"GET"}},
			`header X-HTTP-Method-Override names method "GET", which is routed otherwise than POST /search; send the request with that method`},
		{"POST", "/search", http.Header{"X-Method-Override": {" head "}},
			`header X-Method-Override names method "head", which is routed otherwise than POST /search; send the request with that method`},
		{"POST", "/search", http.Header{"X_http_method": {"GET"}},
			`header X-HTTP-Method names method "GET", which is routed otherwise than POST /search; send the request with that method`},
		{"POST", "/search", http.Header{"X-Http-Method-Override": {"PUT", "GET"}},
			`header X-HTTP-Method-Override names method "GET", which is routed otherwise than POST /search; send the request with that method`},
		{"POST", "/items", http.Header{"X-Http-Method-Override": {"DELETE"}}, ""}, // both write
		{"POST", "/items", http.Header{"X-Http-Method-Override": {""}}, ""},
		{"POST", "/items", http.Header{"X-Http-Method-Override": {"post"}}, ""},
		{"GET", "/items", http.Header{"X-Http-Method-Override": {"HEAD"}}, ""}, // GET routes take HEAD
		{"POST", "/search?q=1&_method=GET", nil,
			`query string: field _method names method "GET", which is routed otherwise than POST /search; send the request with that method`},
		{"POST", "/search?q=1;%5FMETHOD=get", nil,
			`query string: field _method names method "get", which is routed otherwise than POST /search; send the request with that method`},
		{"POST", "/search?q=a_b&_method=PATCH", nil, ""},
		{"POST", "/search", http.Header{"X-Original-Url": {"/auth/login"}},
			`header X-Original-URL names path "/auth/login", which is routed otherwise than POST /search; send the request to that path`},
		{"POST", "/items", http.Header{"X_rewrite_url": {"/AUTH/Login/?x=1"}},
			`header X-Rewrite-URL names path "/AUTH/Login/", which is routed otherwise than POST /items; send the request to that path`},
		{"POST", "/items", http.Header{"X-Original-Url": {"/other/thing?x=1"}}, ""}, // both write
		{"POST", "/items", http.Header{"X-Original-Url": {"%zz"}}, `header X-Original-URL is not a URI: "%zz"`},
		{"POST", "/search?_method=" + strings.Repeat("G", 40), nil, ""}, // no such method: write, as POST
		{"GET", "/search?_method=" + strings.Repeat("P", 40), nil,
			`query string: field _method names method "PPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPP...", which is routed otherwise than GET /search; send the request with that method`},
	} {
		r := httptest.NewRequest(c.method, c.uri, nil)
		for k, v := range c.header {
			r.Header[k] = v
		}
		got := ""
		if aerr := checkOverride(pol, r, c.method, r.URL.Path); aerr != nil {
			if aerr.status != http.StatusBadRequest {
				t.Errorf("%s %s %v: status %d; want 400", c.method, c.uri, c.header, aerr.status)
			}
			got = aerr.message
		}
		if got != c.want {
			t.Errorf("%s %s %v:\n got %q\nwant %q", c.method, c.uri, c.header, got, c.want)
		}
	}
}

func TestBodyOverrides(t *testing.T) {
	t.Parallel()
	pol := overridePol(t)
	form := "application/x-www-form-urlencoded"
	for _, c := range []struct {
		method, path, contentType string
		want                      bool
	}{
		{"POST", "/search", form, true},
		{"POST", "/items", form, true}, // GET /items is read, POST write
		{"POST", "/search", "multipart/form-data; boundary=x", true},
		{"POST", "/search", "application/json", false},
		{"PUT", "/search", form, false}, // frameworks override POSTs only
		{"POST", "/search", "", false},
	} {
		r := httptest.NewRequest(c.method, c.path, strings.NewReader("a=b"))
		r.Header.Set("Content-Type", c.contentType)
		if got := bodyOverrides(pol, r, c.path); got != c.want {
			t.Errorf("%s %s %q: %v; want %v", c.method, c.path, c.contentType, got, c.want)
		}
	}
	// a method only a route names, or none does
	link, err := policy.Parse("link.yaml", []byte("version: 1\nroutes:\n  - {match: \"LINK /x\", class: a}\n  - {match: \"POST /y\", class: b}\n  - {match: \"* *\", class: c}\nlimits:\n  - {name: ip, by: [ip], rate: 10/s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{"/x": true, "/y": true, "/z": false} {
		r := httptest.NewRequest("POST", path, strings.NewReader("a=b"))
		r.Header.Set("Content-Type", form)
		if got := bodyOverrides(link, r, path); got != want {
			t.Errorf("POST %s under LINK /x, POST /y, * *: watched %v; want %v", path, got, want)
		}
	}
	// a path every method routes alike needs no watching
	same, err := policy.Parse("same.yaml", []byte("version: 1\nroutes:\n  - {match: \"* /x*\", class: a}\n  - {match: \"GET *\", class: b}\nlimits:\n  - {name: ip, by: [ip], rate: 10/s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/x", strings.NewReader("a=b"))
	r.Header.Set("Content-Type", form)
	if bodyOverrides(same, r, "/x") {
		t.Error("POST /x under \"* /x*\": watched; want not")
	}
}

// scanAll feeds body to s in chunks of size n and ends it, returning the
// first error.
func scanAll(s bodyScanner, body string, n int) error {
	for len(body) > 0 {
		k := min(n, len(body))
		if err := s.feed([]byte(body[:k])); err != nil {
			return err
		}
		body = body[k:]
	}
	return s.end()
}

// TestBodyScanners: the streaming scanners refuse the bodies whose
// _method routes otherwise, however the body is cut, as reading it whole
// does.
func TestBodyScanners(t *testing.T) {
	t.Parallel()
	pol := overridePol(t)
	pad := strings.Repeat("x", 100<<10)
	const form, multi = "application/x-www-form-urlencoded", "multipart/form-data; boundary=b"
	for _, c := range []struct {
		contentType, body string
		refused           bool
	}{
		{form, "q=1&_method=GET", true},
		{form, "q=1&_method=GET&r=2", true},
		{form, "pad=" + pad + "&_method=get", true},
		{form, "pad=" + pad + ";%5f%6Dethod=GET", true},
		{form, "_METHOD=GET", true},
		{form, "_method=G%45T", true},
		{form, "_method=PATCH", false},
		{form, "_method=", false},
		{form, "_method", false},
		{form, "x_method=GET", false},
		{form, strings.Repeat("y", 200) + "_method=GET", false}, // one long name
		{form, "a=_method=GET", false},                          // a value
		{form, "_method=%zzGET", false},                         // dropped by ParseForm
		{form, "", false},
		{multi, multipartBody("_method", "GET"), true},
		{multi, multipartBody("pad", pad, "_Method", "get"), true},
		{multi, multipartBody("pad", pad, "_method", "PATCH", "q", "1"), false},
		{multi, multipartBody("pad", pad), false},
		{multi, "not multipart at all _method=GET", false},
	} {
		for _, n := range []int{1, 3, 7, 1000, 4096, 1 << 20} {
			err := scanAll(newBodyScanner(pol, "/search", c.contentType), c.body, n)
			if got := err != nil; got != c.refused {
				t.Errorf("%.40q in chunks of %d: refused %v (%v); want %v", c.body, n, got, err, c.refused)
			}
		}
		if whole := bodyOverride(pol, "/search", []byte(c.body), c.contentType) != nil; whole != c.refused {
			t.Errorf("%.40q read whole: refused %v; want %v", c.body, whole, c.refused)
		}
	}
}

func multipartBody(fields ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(fields); i += 2 {
		b.WriteString("--b\r\nContent-Disposition: form-data; name=\"" + fields[i] + "\"\r\n\r\n" + fields[i+1] + "\r\n")
	}
	b.WriteString("--b--\r\n")
	return b.String()
}

// TestMultipartScannerStops: a body not read to its end (the upstream
// failed, the client went away) leaves no scanning goroutine behind.
func TestMultipartScannerStops(t *testing.T) {
	t.Parallel()
	pol := overridePol(t)
	for range 50 {
		s := newBodyScanner(pol, "/search", "multipart/form-data; boundary=b").(*multipartScanner)
		_ = s.feed([]byte("--b\r\nContent-Disposition: form-data; name=\"pad\"\r\n\r\nxxxx"))
		s.stop()
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			t.Fatal("the scanning goroutine did not end after stop")
		}
	}
}

// TestProxyRefusesOverride: through the proxy, an override routed
// otherwise is a 400 envelope naming where it came from, also when it
// comes after the first 100 KiB of a streamed body, which the upstream
// then never gets whole; an override routed alike is forwarded intact.
func TestProxyRefusesOverride(t *testing.T) {
	t.Parallel()
	f := newProxyFixtureWith(t, nil, overridePolicy)
	form := "application/x-www-form-urlencoded"
	pad := "pad=" + strings.Repeat("x", 100<<10) + "&"
	for _, c := range []struct {
		name, uri, body string
		hdr             []string
		want            string
	}{
		{"header", "/search", "", []string{"X-HTTP-Method-Override", "GET"}, `header X-HTTP-Method-Override names method \"GET\"`},
		{"small form", "/search", "_method=GET", []string{"Content-Type", form}, `body: field _method names method \"GET\"`},
		{"large form", "/search", pad + "_method=GET", []string{"Content-Type", form}, `body: field _method names method \"GET\"`},
		{"large multipart", "/search", multipartBody("pad", pad, "_method", "GET"), []string{"Content-Type", "multipart/form-data; boundary=b"},
			`body: field _method names method \"GET\"`},
		{"login form", "/auth/login", "username=a&_method=GET", []string{"Content-Type", form}, `body: field _method names method \"GET\"`},
	} {
		resp, body := f.do(t, "POST", c.uri, c.body, append([]string{"X-Forwarded-For", "10.0.0.1"}, c.hdr...)...)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `"code":"BAD_REQUEST"`) || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %.300s; want 400 BAD_REQUEST naming %s", c.name, resp.StatusCode, body, c.want)
		}
	}
	resp, body := f.do(t, "POST", "/search", "\x1f\x8b", "Content-Type", form, "Content-Encoding", "gzip", "X-Forwarded-For", "10.0.0.1")
	if resp.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(body, "UNSUPPORTED_MEDIA_TYPE") {
		t.Errorf("a gzip form body on a path methods route apart: %d %.200s; want 415", resp.StatusCode, body)
	}
	ok := pad + "_method=PATCH&name=a"
	resp, _ = f.do(t, "POST", "/items", ok, "Content-Type", form, "X-Forwarded-For", "10.0.0.1")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /items with _method=PATCH: %d; want 200", resp.StatusCode)
	}
	// the refused large bodies may have reached the upstream cut short,
	// and their handlers may end after this request's: every body it got
	// lacks the refused field, and one is this request's, whole
	for whole := false; !whole; {
		select {
		case b := <-f.bodies:
			if strings.Contains(b, "_method=GET") || strings.Contains(b, "\r\n\r\nGET\r\n") {
				t.Errorf("the upstream got a refused _method field whole (%d bytes)", len(b))
			}
			whole = b == ok
		case <-time.After(5 * time.Second):
			t.Fatalf("the upstream never got the %d bytes of the request with _method=PATCH whole", len(ok))
		}
	}
}

// BenchmarkCheckOverride: what a request with no override pays.
func BenchmarkCheckOverride(b *testing.B) {
	p, err := policy.Parse("override.yaml", []byte(overridePolicy))
	if err != nil {
		b.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/search?q=shoes&page=2", nil)
	r.Header.Set("Accept", "application/json")
	r.Header.Set("User-Agent", "app/1.0")
	r.Header.Set("X-User-Id", "alice")
	b.ReportAllocs()
	for b.Loop() {
		if checkOverride(p, r, "GET", "/search") != nil {
			b.Fatal("refused")
		}
	}
}

// FuzzFormScanner: the streaming scanner and the whole-body reading
// refuse the same url-encoded bodies, however the body is cut.
func FuzzFormScanner(f *testing.F) {
	f.Add("q=1&_method=GET", 3)
	f.Add("%5Fmethod=G%45T;a=b", 1)
	f.Add("_method=PATCH&_method=get", 5)
	f.Add("a=%zz&_method=+GET+", 2)
	pol, err := policy.Parse("override.yaml", []byte(overridePolicy))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body string, n int) {
		if n < 1 {
			n = 1 - n%64
		}
		streamed := scanAll(newBodyScanner(pol, "/search", "application/x-www-form-urlencoded"), body, n) != nil
		whole := bodyOverride(pol, "/search", []byte(body), "application/x-www-form-urlencoded") != nil
		if streamed != whole {
			t.Errorf("%q in chunks of %d: streamed refused %v, whole %v", body, n, streamed, whole)
		}
	})
}

// BenchmarkBodyScanners: what watching a form body for _method costs
// per byte as it streams (32 KiB reads, as the proxy's copy makes).
func BenchmarkBodyScanners(b *testing.B) {
	pol, err := policy.Parse("override.yaml", []byte(overridePolicy))
	if err != nil {
		b.Fatal(err)
	}
	form := "pad=" + strings.Repeat("x", 1<<20) + "&_method=PATCH"
	multi := multipartBody("pad", strings.Repeat("x", 1<<20), "_method", "PATCH")
	for _, c := range []struct{ name, ct, body string }{
		{"urlencoded", "application/x-www-form-urlencoded", form},
		{"multipart", "multipart/form-data; boundary=b", multi},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				if err := scanAll(newBodyScanner(pol, "/search", c.ct), c.body, 32<<10); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
