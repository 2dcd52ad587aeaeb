package api

import (
	"maps"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// FuzzDecodeCheck: no body crashes the decoder, every rejection names a
// field or the body, and every accepted input is within bounds.
func FuzzDecodeCheck(f *testing.F) {
	for _, s := range []string{
		`{"endpoint":"POST /auth/login","ip":"198.51.100.7","user_id":"u_42","device_id":"d_1","account":"alice@example.com","cost":1}`,
		`{"endpoint":"GET /","ip":"::1"}`, `{"ip":"1.2.3.4"}`, `[]`, `{"cost":-1}`, `{"endpoint":"GET /","ip":"1.2.3.4","cost":1e5}`, ``, `null`,
		`{"endpoint":"GET /","ip":"::1","attributes":{"plan":"free","tenant":"acme","app_version":"5.2.1"}}`,
		`{"endpoint":"GET /","ip":"::1","attributes":{"Plan":"free"}}`, `{"endpoint":"GET /","ip":"::1","attributes":{"plan":1}}`,
		`{"endpoint":"GET /","ip":"::1","attributes":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var in engine.Input
		aerr := decodeCheck(body, &in)
		if aerr != nil {
			if aerr.status != 400 || !(strings.HasPrefix(aerr.message, "field ") || strings.HasPrefix(aerr.message, "body") || strings.HasPrefix(aerr.message, "unknown field")) {
				t.Fatalf("bad rejection %+v", aerr)
			}
			return
		}
		if in.Endpoint == "" || in.IP == "" || in.Cost < 0 || in.Cost > MaxCost || len(in.UserID) > MaxIDLen ||
			len(in.DeviceID) > MaxIDLen || len(in.Account) > MaxIDLen || !utf8.ValidString(in.Account) ||
			len(in.Attributes) > policy.MaxAttributes {
			t.Fatalf("accepted out-of-bounds input %+v", in)
		}
		for k, v := range in.Attributes {
			if policy.CheckAttribute(k, v) != "" {
				t.Fatalf("accepted attribute %q=%q", k, v)
			}
		}
	})
}

// FuzzDecodeReport: no report body crashes the decoder or is accepted
// without a type and a subject.
func FuzzDecodeReport(f *testing.F) {
	for _, s := range []string{`{"type":"login_failed","account":"alice","ip":"198.51.100.7"}`, `{"type":"step_up_passed"}`, `{}`, `[`,
		`{"type":"login_failed","account":"a","attributes":{"plan":"free"}}`, `{"type":"login_failed","account":"a","attributes":{"Plan":"x"}}`,
		`{"type":"otp_sent","device_id":"d","attributes":{"phone_prefix":"4479"}}`, `{"type":"OTP","ip":"192.0.2.1"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var r streams.Report
		if aerr := decodeReport(body, &r, new(string)); aerr != nil {
			if aerr.status != 400 {
				t.Fatalf("status %d", aerr.status)
			}
			return
		}
		if !policy.ValidEventType(r.Type) || (r.Account == "" && r.IP == "" && r.DeviceID == "" && r.UserID == "") {
			t.Fatalf("accepted %+v", r)
		}
		if len(r.Attributes) > policy.MaxAttributes {
			t.Fatalf("accepted %d attributes", len(r.Attributes))
		}
		for k, v := range r.Attributes {
			if policy.CheckAttribute(k, v) != "" {
				t.Fatalf("accepted attribute %q=%q", k, v)
			}
		}
	})
}

// FuzzServer throws arbitrary methods, paths, headers and bodies at every
// endpoint: the server never panics and never answers 5xx.
func FuzzServer(f *testing.F) {
	for _, s := range []struct{ method, path, body string }{
		{"POST", "/v1/check", `{"endpoint":"GET /","ip":"1.2.3.4"}`},
		{"PUT", "/v1/admin/multipliers/ip/1.2.3.4", `{"multiplier":0.5,"ttl":"1m"}`},
		{"GET", "/v1/admin/subjects/device/d%7D1", ``},
		{"DELETE", "/v1/admin/lockouts/alice", ``},
		{"POST", "/v1/report", `{"type":"login_failed","account":"a"}`},
		{"GET", "/v1/admin/offenders", ``},
	} {
		f.Add(s.method, s.path, s.body, "Bearer tok")
	}
	f.Fuzz(func(t *testing.T, method, path, body, auth string) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \r\n\t#?") || !isTokenString(method) {
			return
		}
		fx := newFixture(t, nil, "tok")
		r := httptest.NewRequest("GET", "/", strings.NewReader(body))
		r.Method = method
		r.URL.Path = path
		r.Header.Set("Authorization", auth)
		w := httptest.NewRecorder()
		fx.srv.ServeHTTP(w, r)
		if w.Code >= 500 && w.Code != 503 {
			t.Fatalf("%s %s -> %d %s", method, path, w.Code, w.Body)
		}
	})
}

func isTokenString(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return true
}

// FuzzScanCheck: whatever the fast path accepts, encoding/json accepts
// with the same fields.
func FuzzScanCheck(f *testing.F) {
	for _, s := range []string{
		`{"endpoint":"POST /auth/login","ip":"198.51.100.7","user_id":"u_42","device_id":"d_1","account":"alice@example.com","cost":1}`,
		` {"endpoint" : "GET /", "ip":"::1", "cost": -0 } `, `{"Endpoint":"GET /"}`, `{"ip":"a","ip":"b"}`, `{"cost":01}`,
		`{"cost":1.5}`, `{"user_id":"\u00e9"}`, `{"user_id":"zoë"}`, `{"x":1}`, `{}`, `{"ip":null}`, `{"ip":"1"} {}`,
		`{"ip":"1","attributes":{"plan":"free","tenant":"acme"}}`, `{"attributes":{}}`, `{"attributes":null}`,
		`{"attributes":{"a":"1","a":"2"}}`, `{"attributes":{"a":"1"},"attributes":{"b":"2"}}`, `{"attributes":{"a":1}}`,
		`{"attributes":{"\u0061":"x"}}`, `{"Attributes":{"a":"x"}}`, `{"attributes":{"a":"x",}}`, `{"attributes":{"é":"ü"}}`,
	} {
		f.Add([]byte(s))
	}
	deref := func(p *string) string {
		if p == nil {
			return "<nil>"
		}
		return "=" + *p
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var fast checkRequest
		if !scanCheck(body, &fast) {
			return
		}
		var std checkRequest
		if aerr := unmarshalStrict(body, &std); aerr != nil {
			t.Fatalf("%q: fast path accepted, encoding/json says %v", body, aerr.message)
		}
		if deref(fast.Endpoint) != deref(std.Endpoint) || deref(fast.IP) != deref(std.IP) || deref(fast.UserID) != deref(std.UserID) ||
			deref(fast.DeviceID) != deref(std.DeviceID) || deref(fast.Account) != deref(std.Account) || string(fast.Cost) != string(std.Cost) ||
			(fast.Attributes == nil) != (std.Attributes == nil) || !maps.Equal(fast.Attributes, std.Attributes) {
			t.Fatalf("%q: fast %+v, encoding/json %+v", body, fast, std)
		}
	})
}

// BenchmarkDecodeCheck decodes and validates a typical check body: the
// fast path against encoding/json (unmarshalStrict) and the same checks.
func BenchmarkDecodeCheck(b *testing.B) {
	body := []byte(`{"endpoint":"POST /auth/login","ip":"198.51.100.7","user_id":"u_42","device_id":"d_1","account":"alice@example.com","cost":1}`)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		var in engine.Input
		for i := 0; i < b.N; i++ {
			if aerr := decodeCheck(body, &in); aerr != nil {
				b.Fatal(aerr.message)
			}
		}
	})
	b.Run("fast-attributes", func(b *testing.B) {
		body := []byte(`{"endpoint":"POST /auth/login","ip":"198.51.100.7","user_id":"u_42","attributes":{"plan":"free","tenant":"acme"},"cost":1}`)
		b.ReportAllocs()
		var in engine.Input
		for i := 0; i < b.N; i++ {
			if aerr := decodeCheck(body, &in); aerr != nil || len(in.Attributes) != 2 {
				b.Fatal(aerr)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			var req checkRequest
			if aerr := unmarshalStrict(body, &req); aerr != nil {
				b.Fatal(aerr.message)
			}
		}
	})
}
