package api

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
)

func TestAccountFromBody(t *testing.T) {
	t.Parallel()
	const form = "application/x-www-form-urlencoded"
	const multi = "multipart/form-data; boundary=b"
	mp := func(kv ...string) string { // a multipart body of fields name, value
		var b strings.Builder
		for i := 0; i+1 < len(kv); i += 2 {
			b.WriteString("--b\r\nContent-Disposition: form-data; name=\"" + kv[i] + "\"\r\n\r\n" + kv[i+1] + "\r\n")
		}
		b.WriteString("--b--\r\n")
		return b.String()
	}
	for _, c := range []struct {
		name, body, ctype, query, want, wantErr string
	}{
		{"exact", `{"username":"alice","password":"x"}`, "application/json", "", "alice", ""},
		{"capital", `{"Username":"alice"}`, "application/json", "", "alice", ""},
		{"another key, folding characters and all", `{"uſernam\u212a":"alice"}`, "", "", "", ""},
		{"long s", `{"uſername":"alice"}`, "", "", "alice", ""},
		{"escaped key", `{"\u0075sername":"alice"}`, "application/json", "", "alice", ""},
		{"nested, as Devise reads it", `{"user":{"username":"alice"},"x":1}`, "application/json", "", "alice", ""},
		{"nested deeper", `{"a":{"b":{"Username":"alice"}}}`, "application/json", "", "alice", ""},
		{"nested and top-level", `{"username":"a","user":{"username":"b"}}`, "application/json", "", "", "more than once"},
		{"in an array is not read", `{"users":[{"username":"alice"}],"n":[1,[2,{"username":"b"}]]}`, "application/json", "", "", ""},
		{"after an array", `{"n":[1,{"a":2}],"username":"alice"}`, "application/json", "", "alice", ""},
		{"broken nested", `{"user":{"username":"alice"`, "application/json", "", "alice", ""},
		{"form nested, as Devise sends it", "user[username]=alice&user[password]=x", form, "", "alice", ""},
		{"form nested array", "user[username][]=alice", form, "", "alice", ""},
		{"form nested and top-level", "username=a&user[username]=b", form, "", "", "more than once"},
		{"a number, as its text", `{"username":14155550100}`, "application/json", "", "14155550100", ""},
		{"a negative decimal", `{"username": -1.5e3}`, "application/json", "", "-1.5e3", ""},
		{"not a string or number", `{"username":true}`, "application/json", "", "", ""},
		{"an object", `{"username":{"$ne":null}}`, "application/json", "", "", ""},
		{"an array of one", `{"username":[ "alice" ]}`, "application/json", "", "alice", ""},
		{"an array of one number", `{"username":[7]}`, "application/json", "", "7", ""},
		{"an empty array", `{"username":[]}`, "application/json", "", "", ""},
		{"an array of two", `{"username":["a","b"]}`, "application/json", "", "", "more than once"},
		{"an array in an array", `{"username":[["a"]]}`, "application/json", "", "", ""},
		{"a number and a string", `{"username":1,"username":"a"}`, "application/json", "", "", "more than once"},
		{"form array", "username[]=alice", form, "", "alice", ""},
		{"form indexed", "USERNAME[12]=alice", form, "", "alice", ""},
		{"form nested is another field", "username[name]=alice", form, "", "", ""},
		{"a field named with brackets", "user[login]=alice", form, "", "", ""},
		{"form array twice", "username[]=a&username[1]=b", form, "", "", "more than once"},
		{"form and form array", "username=a&username[]=b", form, "", "", "more than once"},
		{"multipart array", mp("username[]", "alice"), multi, "", "alice", ""},
		{"twice", `{"username":"a","username":"b"}`, "application/json", "", "", `body: field "username" is given more than once`},
		{"twice spelled", `{"username":"a","USERNAME":"b"}`, "application/json", "", "", "more than once"},
		{"form", "username=alice&password=x", form, "", "alice", ""},
		{"form charset", "username=alice", form + "; charset=utf-8", "", "alice", ""},
		{"form capital", "Username=alice", form, "", "alice", ""},
		{"form twice", "username=a&username=b", form, "", "", "more than once"},
		{"form without its content type", "username=alice", "text/plain", "", "", ""},
		{"json under a form type", `{"username":"alice"}`, form, "", "alice", ""},
		{"broken json", `{"username":"alice",`, "application/json", "", "alice", ""},
		{"UTF-8 BOM", "\xEF\xBB\xBF{\"username\":\"alice\"}", "application/json", "", "alice", ""},
		{"UTF-16LE", "{\x00\"\x00u\x00s\x00e\x00r\x00n\x00a\x00m\x00e\x00\"\x00:\x00\"\x00a\x00l\x00\"\x00}\x00", "application/json", "", "al", ""},
		{"UTF-16BE BOM", "\xFE\xFF\x00{\x00\"\x00u\x00s\x00e\x00r\x00n\x00a\x00m\x00e\x00\"\x00:\x00\"\x00a\x00l\x00\"\x00}", "application/json", "", "al", ""},
		{"UTF-16LE space first", " \x00{\x00\"\x00u\x00s\x00e\x00r\x00n\x00a\x00m\x00e\x00\"\x00:\x00\"\x00\xe9\x00\"\x00}\x00", "application/json", "", "\u00e9", ""},
		{"UTF-32BE", "\x00\x00\x00{\x00\x00\x00\"\x00\x00\x00u\x00\x00\x00s\x00\x00\x00e\x00\x00\x00r\x00\x00\x00n\x00\x00\x00a\x00\x00\x00m\x00\x00\x00e\x00\x00\x00\"\x00\x00\x00:\x00\x00\x00\"\x00\x00\x00a\x00\x00\x00\"\x00\x00\x00}", "application/json", "", "a", ""},
		{"UTF-32LE BOM", "\xFF\xFE\x00\x00{\x00\x00\x00\"\x00\x00\x00u\x00\x00\x00s\x00\x00\x00e\x00\x00\x00r\x00\x00\x00n\x00\x00\x00a\x00\x00\x00m\x00\x00\x00e\x00\x00\x00\"\x00\x00\x00:\x00\x00\x00\"\x00\x00\x00a\x00\x00\x00\"\x00\x00\x00}\x00\x00\x00", "application/json", "", "a", ""},
		{"array", `[{"username":"alice"}]`, "application/json", "", "", ""},
		{"empty", ``, "application/json", "", "", ""},
		{"query", "password=x", form, "username=alice", "alice", ""},
		{"query, no body", "", "", "Username=alice&x=1", "alice", ""},
		{"query beside json", `{"password":"x"}`, "application/json", "username=alice", "alice", ""},
		{"query and form", "username=a", form, "username=b", "", "in the body or the query string"},
		{"query and json", `{"username":"a"}`, "application/json", "USERNAME=b", "", "more than once"},
		{"query twice", "", "", "username=a&username=b", "", "more than once"},
		{"query after a semicolon", "password=x", form, "x=1;username=alice", "alice", ""},
		{"query twice, a semicolon between", "", "", "username=a;username=b", "", "more than once"},
		{"query after a semicolon and in the body", "username=a", form, "x=1;username=b", "", "in the body or the query string"},
		{"multipart", mp("username", "alice", "password", "x"), multi, "", "alice", ""},
		{"multipart capital", mp("Username", "alice"), multi, "", "alice", ""},
		{"multipart twice", mp("username", "a", "username", "b"), multi, "", "", "more than once"},
		{"multipart and query", mp("username", "a"), multi, "username=b", "", "in the body or the query string"},
		{"multipart quoted-printable", "--b\r\nContent-Disposition: form-data; name=\"username\"\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n=61lice\r\n--b--\r\n", multi, "", "alice", ""},
		{"multipart RFC 2231 name", "--b\r\nContent-Disposition: form-data; name*=UTF-8''username\r\n\r\nalice\r\n--b--\r\n", multi, "", "alice", ""},
		{"multipart cut short", "--b\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nalice\r\n--b\r\nContent-Disp", multi, "", "alice", ""},
		{"multipart without a boundary", mp("username", "alice"), "multipart/form-data", "", "", ""},
	} {
		got, aerr := accountFromBody([]byte(c.body), c.ctype, c.query, []string{"username"})
		switch {
		case c.wantErr == "" && aerr != nil:
			t.Errorf("%s: error %v", c.name, aerr)
		case c.wantErr != "" && (aerr == nil || aerr.status != 400 || !strings.Contains(aerr.message, c.wantErr)):
			t.Errorf("%s: error %v, want 400 %q", c.name, aerr, c.wantErr)
		case got != c.want:
			t.Errorf("%s: account %q, want %q", c.name, got, c.want)
		}
	}
}

// FuzzAccountFromBody: whenever encoding/json reads a login body into a
// struct with an account, the proxy finds the same account in it, or
// refuses the body (one it reads without an account at the top level,
// the proxy may find in a nested object: Devise's shape).
func FuzzAccountFromBody(f *testing.F) {
	for _, s := range []string{`{"username":"a"}`, `{"Username":"a","x":1}`, `{"uſername":"a"}`, `{"\u0055SERNAME":"b"}`,
		`{"username":"a","username":"b"}`, `{"a":{"username":"x"},"username":"y"}`, `{"username":null}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		got, aerr := accountFromBody([]byte(body), "application/json", "", []string{"username"})
		var login struct {
			Username string `json:"username"`
		}
		if json.Unmarshal([]byte(body), &login) != nil || aerr != nil {
			return
		}
		if got != login.Username && login.Username != "" {
			t.Fatalf("%q: proxy read %q, encoding/json %q", body, got, login.Username)
		}
	})
}

func TestSameHeaderName(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"X-User-Id", "X-User-Id", true}, {"x-user-id", "X-User-Id", true}, {"X_User_Id", "X-User-Id", true},
		{"X-User-Ids", "X-User-Id", false}, {"X-User-Ix", "X-User-Id", false},
	} {
		if got := sameHeaderName(c.a, c.b); got != c.want {
			t.Errorf("sameHeaderName(%q, %q) = %v", c.a, c.b, got)
		}
	}
}

func TestCanonicalID(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ subject, id, want, wantErr string }{
		{"ip", "2001:DB8::1", "2001:db8::1", ""},
		{"ip", "::ffff:192.0.2.1", "192.0.2.1", ""},
		{"ip", "192.0.2.1", "192.0.2.1", ""},
		{"ip", "fe80::1%eth0", "", "is not an IP address"},
		{"ip", "example.com", "", "is not an IP address"},
		{"asn", "AS64500", "64500", ""},
		{"asn", "as64500", "64500", ""},
		{"asn", "064500", "64500", ""},
		{"asn", "4294967296", "", "is not an AS number"},
		{"asn", "-1", "", "is not an AS number"},
		{"account", " Alice@Example.COM ", "alice@example.com", ""},
		{"account", "  ", "", "id is required"},
		{"user", "U_42", "U_42", ""},
		{"device", "", "", "id is required"},
	} {
		got, aerr := canonicalID(c.subject, c.id)
		switch {
		case c.wantErr == "" && aerr != nil:
			t.Errorf("%s/%s: %v", c.subject, c.id, aerr)
		case c.wantErr != "" && (aerr == nil || !strings.Contains(aerr.message, c.wantErr)):
			t.Errorf("%s/%s: %v, want %q", c.subject, c.id, aerr, c.wantErr)
		case got != c.want:
			t.Errorf("%s/%s = %q, want %q", c.subject, c.id, got, c.want)
		}
	}
}

// TestAPIToken: with an API token, check and report need it (401, then
// the admin API's throttle: 429 after 10 failures); the admin token is
// not it; attestation, health and metrics do not need it.
func TestAPIToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "adm1n")
	var err error
	f.srv, err = New(Options{Engine: f.srv.o.Engine, AdminToken: "adm1n", Store: f.store, APIToken: "ap1", Gatherer: f.reg, Now: func() time.Time { return f.now }})
	if err != nil {
		t.Fatal(err)
	}
	f.srv.Handle("/v1/attest/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "attest") }))
	check := `{"endpoint":"GET /x","ip":"192.0.2.1"}`
	expect(t, f.do(t, "POST", "/v1/check", check, "Authorization", "Bearer ap1"), 200, "")
	// the scheme is case-insensitive (RFC 9110 11.1); the token is not
	expect(t, f.do(t, "POST", "/v1/check", check, "Authorization", "bearer ap1"), 200, "")
	expect(t, f.do(t, "POST", "/v1/check", check, "Authorization", "BEARER ap1"), 200, "")
	expect(t, f.do(t, "POST", "/v1/check", check, "Authorization", "Bearer AP1"), 401, "")
	expect(t, f.do(t, "POST", "/v1/check", check, "Authorization", "Bearerap1"), 401, "")
	expect(t, f.do(t, "POST", "/v1/check", check), 401,
		`{"error":{"code":"UNAUTHORIZED","message":"missing or wrong api token","details":{},"request_id":"req-1"}}`, "Www-Authenticate", `Bearer realm="tollgate-api"`)
	expect(t, f.do(t, "POST", "/v1/report", `{"type":"login_failed","account":"a"}`, "Authorization", "Bearer adm1n"), 401, "")
	expect(t, f.do(t, "POST", "/v1/attest/challenge", `{}`), 200, "attest")
	expect(t, f.do(t, "GET", "/healthz", ""), 200, "")
	for i := 0; i < 6; i++ { // 10 failures in all with the 4 above
		expect(t, f.do(t, "POST", "/v1/check", check, "Authorization", "Bearer guess"), 401, "")
	}
	expect(t, f.do(t, "POST", "/v1/check", check, "Authorization", "Bearer ap1"), 429, "", "Retry-After", "60")
	// the admin API keeps its own count
	expect(t, f.do(t, "GET", "/v1/admin/subjects/device/d1", "", "Authorization", "Bearer adm1n"), 200, "")
	f.now = t0.Add(time.Minute)
	expect(t, f.do(t, "POST", "/v1/check", check, "Authorization", "Bearer ap1"), 200, "")
}

// TestPublicListener: in proxy mode the public handler serves health and
// the attestation endpoints (under a moved prefix too) and forwards every
// other path, the limiter's API paths and /metrics included, normalised.
func TestPublicListener(t *testing.T) {
	t.Parallel()
	seen := make(chan string, 10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Method + " " + r.URL.EscapedPath()
		_, _ = io.WriteString(w, "upstream")
	}))
	t.Cleanup(up.Close)
	p, err := policy.Parse("p.yaml", []byte("version: 1\nlimits:\n  - {name: ip, by: [ip], rate: 100/min}\n"))
	if err != nil {
		t.Fatal(err)
	}
	eng, _ := engine.New(engine.Options{Store: bucket.NewMemoryStore(bucket.MemoryOptions{}), Policy: func() *policy.Policy { return p },
		Metrics: engine.NewMetrics(prometheus.NewRegistry())})
	srv, err := New(Options{Engine: eng, AttestPrefix: "/app/attest/"})
	if err != nil {
		t.Fatal(err)
	}
	srv.Handle("/v1/attest/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "attest "+r.URL.Path) }))
	u, _ := url.Parse(up.URL)
	if err := srv.EnableProxy(ProxyOptions{Upstream: u}); err != nil {
		t.Fatal(err)
	}
	srv.SetState("ready")
	pub := srv.Public()
	for _, c := range []struct{ method, path, want, upstream string }{
		{"GET", "/healthz", `{"status":"ok"}` + "\n", ""},
		{"GET", "//readyz/", "", ""},
		{"POST", "/app/attest/challenge", "attest /v1/attest/challenge", ""},
		{"POST", "/app/./attest//apple/", "attest /v1/attest/apple", ""},
		{"POST", "/v1/attest/challenge", "upstream", "POST /v1/attest/challenge"},
		{"POST", "/v1/check", "upstream", "POST /v1/check"},
		{"GET", "/metrics", "upstream", "GET /metrics"},
		{"GET", "/v1/admin/offenders", "upstream", "GET /v1/admin/offenders"},
		{"GET", "/a/%7e/./b//c/", "upstream", "GET /a/~/b/c"},
		{"GET", "/a%2fb", "upstream", "GET /a%2Fb"},
	} {
		w := httptest.NewRecorder()
		pub.ServeHTTP(w, httptest.NewRequest(c.method, c.path, nil))
		if w.Code != 200 || (c.want != "" && w.Body.String() != c.want) {
			t.Errorf("%s %s: %d %q, want 200 %q", c.method, c.path, w.Code, w.Body, c.want)
		}
		if c.upstream != "" {
			if got := <-seen; got != c.upstream {
				t.Errorf("%s %s: upstream saw %q, want %q", c.method, c.path, got, c.upstream)
			}
		}
	}
	if _, err := New(Options{Engine: eng, AttestPrefix: "/attest"}); err == nil {
		t.Error("an attest prefix without its trailing slash was accepted")
	}
}

// TestCheckNormalisesAccount (6.4): however the account is spelled, the
// check API spends one account's budget; a bad one is still refused.
func TestCheckNormalisesAccount(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "")
	for i, acct := range []string{"alice@example.com", "Alice@Example.com", " ALICE@EXAMPLE.COM", "alice@example.com  ", "ALICE@example.com"} {
		body := `{"endpoint":"POST /auth/login","ip":"192.0.2.` + itoa(int64(i+1)) + `","account":` + string(AppendJSONString(nil, acct)) + `}`
		expect(t, f.do(t, "POST", "/v1/check", body), 200, "", "X-RateLimit-Remaining", itoa(int64(4-i)))
	}
	expect(t, f.do(t, "POST", "/v1/check", `{"endpoint":"POST /auth/login","ip":"192.0.2.9","account":"aLiCe@example.com"}`), 429, "")
	expect(t, f.do(t, "POST", "/v1/check", `{"endpoint":"POST /auth/login","ip":"192.0.2.9","account":"A\u0001"}`), 400,
		`{"error":{"code":"BAD_REQUEST","message":"field \"account\" contains a control character","details":{},"request_id":"req-1"}}`)
}

func TestDecodedBody(t *testing.T) {
	t.Parallel()
	const login = `{"username":"alice"}`
	zip := func(kind, s string) string {
		var b bytes.Buffer
		var zw io.WriteCloser
		switch kind {
		case "gzip":
			zw = gzip.NewWriter(&b)
		case "zlib":
			zw = zlib.NewWriter(&b)
		default:
			zw, _ = flate.NewWriter(&b, flate.BestSpeed)
		}
		_, _ = io.WriteString(zw, s)
		_ = zw.Close()
		return b.String()
	}
	for _, c := range []struct {
		name, body string
		encodings  []string
		want       string
		status     int
	}{
		{"none", login, nil, login, 0},
		{"identity", login, []string{"identity"}, login, 0},
		{"gzip", zip("gzip", login), []string{"gzip"}, login, 0},
		{"x-gzip in capitals", zip("gzip", login), []string{"X-GZIP"}, login, 0},
		{"deflate as zlib", zip("zlib", login), []string{"deflate"}, login, 0},
		{"deflate raw", zip("flate", login), []string{"deflate"}, login, 0},
		{"two, last first", zip("gzip", zip("zlib", login)), []string{"deflate, gzip"}, login, 0},
		{"two headers", zip("gzip", zip("zlib", login)), []string{"deflate", "gzip"}, login, 0},
		{"br", login, []string{"br"}, "", http.StatusUnsupportedMediaType},
		{"corrupt", "not gzip", []string{"gzip"}, "", http.StatusBadRequest},
		{"a bomb", zip("gzip", strings.Repeat("a", MaxBody+1)), []string{"gzip"}, "", http.StatusRequestEntityTooLarge},
		{"just under", zip("gzip", strings.Repeat("a", MaxBody)), []string{"gzip"}, strings.Repeat("a", MaxBody), 0},
	} {
		got, aerr := decodedBody([]byte(c.body), c.encodings)
		switch {
		case c.status != 0 && (aerr == nil || aerr.status != c.status):
			t.Errorf("%s: %v; want status %d", c.name, aerr, c.status)
		case c.status == 0 && aerr != nil:
			t.Errorf("%s: %d %s", c.name, aerr.status, aerr.message)
		case c.status == 0 && string(got) != c.want:
			t.Errorf("%s: %.60q; want %.60q", c.name, got, c.want)
		}
	}
}

// FuzzDecodedBody: any body and codings decode without a panic to at
// most MaxBody bytes, or to a 4xx.
func FuzzDecodedBody(f *testing.F) {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, _ = io.WriteString(zw, `{"username":"alice"}`)
	_ = zw.Close()
	f.Add(b.Bytes(), "gzip")
	f.Add([]byte("x\x9c\x03\x00\x00\x00\x00\x01"), "deflate")
	f.Add([]byte("plain"), "identity, gzip")
	f.Fuzz(func(t *testing.T, body []byte, codings string) {
		out, aerr := decodedBody(body, []string{codings})
		if aerr != nil {
			if aerr.status < 400 || aerr.status > 499 {
				t.Fatalf("status %d", aerr.status)
			}
			return
		}
		if len(out) > MaxBody {
			t.Fatalf("%d bytes decoded", len(out))
		}
	})
}

// TestAccountFromBodyFields: a login that takes a username or an email
// (account_body_field: [username, email]) names the account by either,
// and by both is a 400.
func TestAccountFromBodyFields(t *testing.T) {
	t.Parallel()
	fields := []string{"username", "email"}
	for _, c := range []struct{ body, ctype, want, wantErr string }{
		{`{"username":"alice"}`, "application/json", "alice", ""},
		{`{"Email":"alice@example.com"}`, "application/json", "alice@example.com", ""},
		{`{"user":{"email":"a@b"}}`, "application/json", "a@b", ""},
		{"email=a%40b&password=x", "application/x-www-form-urlencoded", "a@b", ""},
		{`{"username":"alice","email":"bob@example.com"}`, "application/json", "",
			`body: the fields "username" and "email" name the account more than once (in some spelling, in the body or the query string); send one of them once`},
		{"username=a&email=b", "application/x-www-form-urlencoded", "", "name the account more than once"},
		{`{"login":"alice"}`, "application/json", "", ""},
	} {
		got, aerr := accountFromBody([]byte(c.body), c.ctype, "", fields)
		switch {
		case c.wantErr == "" && aerr != nil:
			t.Errorf("%s: error %v", c.body, aerr)
		case c.wantErr != "" && (aerr == nil || !strings.Contains(aerr.message, c.wantErr)):
			t.Errorf("%s: error %v, want %q", c.body, aerr, c.wantErr)
		case got != c.want:
			t.Errorf("%s: account %q, want %q", c.body, got, c.want)
		}
	}
}
