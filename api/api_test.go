package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
)

const testPolicy = `version: 1
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "GET /search*",     class: expensive}
  - {match: "GET *",            class: read}
  - {match: "* *",              class: write}
limits:
  - {name: ip-unauth,     by: [ip],             rate: 60/min, if: {authenticated: false}}
  - {name: user-read,     by: [user],           rate: 300/min, if: {class: [read, expensive]}}
  - {name: user-search,   by: [user],           rate: 20/min, if: {class: expensive}}
  - {name: device,        by: [device],         rate: 600/min}
  - {name: login-ip,      by: [ip, route],      rate: 10/min, if: {class: auth}}
  - {name: login-account, by: [account, route], rate: 5/min,  if: {class: auth}}
  - {name: write-shadow,  by: [user],           rate: 1/h, shadow: true, if: {class: write}}
failure_mode: {default: open, auth: closed}
`

// t0 is the fixed clock of these tests: 2024-04-19T10:30:00Z.
var t0 = time.Unix(1713522600, 0).UTC()

type fixture struct {
	srv   *Server
	store bucket.Store
	reg   *prometheus.Registry
	now   time.Time
}

func newFixture(t *testing.T, store bucket.Store, token string) *fixture {
	t.Helper()
	p, err := policy.Parse("test.yaml", []byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{now: t0, reg: prometheus.NewRegistry()}
	if store == nil {
		store = bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return f.now }})
	}
	f.store = store
	eng, err := engine.New(engine.Options{Store: store, Policy: func() *policy.Policy { return p }, Metrics: engine.NewMetrics(f.reg),
		Clock:   func() time.Time { return f.now },
		Breaker: engine.NewBreaker(engine.BreakerOptions{Failures: 1000}, nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	f.srv, err = New(Options{Engine: eng, AdminToken: token, Store: store, Gatherer: f.reg, Now: func() time.Time { return f.now }})
	if err != nil {
		t.Fatal(err)
	}
	f.srv.SetState("ready")
	return f
}

func (f *fixture) do(t *testing.T, method, path, body string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("X-Request-Id", "req-1")
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	f.srv.ServeHTTP(w, r)
	return w
}

func expect(t *testing.T, w *httptest.ResponseRecorder, status int, body string, headers ...string) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status = %d, want %d; body %s", w.Code, status, w.Body)
	}
	if body != "" && strings.TrimSpace(w.Body.String()) != body {
		t.Fatalf("body =\n%s\nwant\n%s", strings.TrimSpace(w.Body.String()), body)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if got := field(w.Header(), headers[i]); got != headers[i+1] {
			t.Errorf("header %s = %q, want %q", headers[i], got, headers[i+1])
		}
	}
}

func TestCheckAllowedThenLimited(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "")
	login := `{"endpoint": "POST /auth/login", "ip": "198.51.100.7", "account": "alice@example.com"}`
	// login-account (5/min) binds: fewest tokens relative to its burst
	expect(t, f.do(t, "POST", "/v1/check", login), 200,
		`{"allowed":true,"limit":5,"remaining":4,"reset":1713522612,"policy":"login-account","request_id":"req-1"}`,
		"X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "4", "X-RateLimit-Reset", "1713522612",
		"RateLimit-Policy", `"login-account";q=5;w=60`, "RateLimit", `"login-account";r=4;t=12`,
		"X-Request-Id", "req-1", "Retry-After", "", "X-RateLimit-Degraded", "")
	for i := 0; i < 4; i++ {
		f.do(t, "POST", "/v1/check", login)
	}
	f.now = t0.Add(1500 * time.Millisecond)
	expect(t, f.do(t, "POST", "/v1/check", login), 429,
		`{"error":{"code":"RATE_LIMITED","message":"Too many requests","details":{"retry_after_ms":10500,"limit":"login-account","scope":"account"},"request_id":"req-1"}}`,
		"Retry-After", "11", "X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1713522660",
		"RateLimit-Policy", `"login-account";q=5;w=60`, "RateLimit", `"login-account";r=0;t=59`)
	// the denied request took nothing: login-ip still has 5 of 10
	f.now = t0.Add(12 * time.Second)
	w := f.do(t, "POST", "/v1/check", `{"endpoint": "POST /auth/login", "ip": "198.51.100.7", "account": "bob"}`)
	// 5 taken at t0, 2 refilled by t0+12s, 1 taken now: 6 (7 taken would leave 5)
	expect(t, w, 200, "", "X-RateLimit-Remaining", "6", "RateLimit-Policy", `"login-ip";q=10;w=60`)
	w = f.do(t, "POST", "/v1/check", `{"endpoint": "POST /auth/login", "ip": "198.51.100.7", "account": "carol", "cost": 0}`)
	expect(t, w, 200, "", "X-RateLimit-Remaining", "6")
}

func TestCheckClassesAndKeys(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "")
	// authenticated read: user-read 300/min and device 600/min apply; user-read binds
	expect(t, f.do(t, "POST", "/v1/check", `{"endpoint":"GET /feed","ip":"203.0.113.9","user_id":"u_42","device_id":"d_1"}`), 200,
		`{"allowed":true,"limit":300,"remaining":299,"reset":1713522601,"policy":"user-read","request_id":"req-1"}`)
	// expensive read: its own 20/min bucket binds
	expect(t, f.do(t, "POST", "/v1/check", `{"endpoint":"GET /search?q=x","ip":"203.0.113.9","user_id":"u_42"}`), 200,
		`{"allowed":true,"limit":20,"remaining":19,"reset":1713522603,"policy":"user-search","request_id":"req-1"}`)
	// no applicable limit (write without user or device is only the shadow... which needs a user)
	expect(t, f.do(t, "POST", "/v1/check", `{"endpoint":"POST /posts","ip":"203.0.113.9","user_id":"u_1"}`), 200,
		`{"allowed":true,"request_id":"req-1"}`)
	// the shadow limit never denies
	expect(t, f.do(t, "POST", "/v1/check", `{"endpoint":"POST /posts","ip":"203.0.113.9","user_id":"u_1"}`), 200, "")
	// IPv4-mapped IPv6 shares the IPv4 bucket
	for i := 0; i < 59; i++ {
		f.do(t, "POST", "/v1/check", `{"endpoint":"GET /x","ip":"192.0.2.1"}`)
	}
	expect(t, f.do(t, "POST", "/v1/check", `{"endpoint":"GET /x","ip":"::ffff:192.0.2.1"}`), 200, "", "X-RateLimit-Remaining", "0")
	expect(t, f.do(t, "POST", "/v1/check", `{"endpoint":"GET /x","ip":"192.0.2.1"}`), 429, "", "Retry-After", "1")
}

func TestCheckBadRequests(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "")
	long := strings.Repeat("a", 257)
	tests := []struct {
		name, body, msg string
	}{
		{"empty", ``, `body: empty; expected a JSON object`},
		{"not json", `{"endpoint":`, `body: truncated JSON`},
		{"syntax", `{"endpoint" "x"}`, `body: invalid JSON at byte 13: invalid character '\"' after object key`},
		{"array", `[]`, `body: expected a JSON object`},
		{"trailing", `{"endpoint":"GET /","ip":"1.2.3.4"} {}`, `body: unexpected data after the JSON object`},
		{"unknown field", `{"endpoint":"GET /","ip":"1.2.3.4","userId":"x"}`, `unknown field \"userId\"`},
		{"missing endpoint", `{"ip":"1.2.3.4"}`, `field \"endpoint\" is required`},
		{"bad endpoint", `{"endpoint":"login","ip":"1.2.3.4"}`, `field \"endpoint\" must be \"METHOD /path\"`},
		{"bad method", `{"endpoint":"GE(T /","ip":"1.2.3.4"}`, `field \"endpoint\" must be \"METHOD /path\": bad method`},
		{"missing ip", `{"endpoint":"GET /"}`, `field \"ip\" is required`},
		{"bad ip", `{"endpoint":"GET /","ip":"1.2.3"}`, `field \"ip\" is not an IP address: \"1.2.3\"`},
		{"ip wrong type", `{"endpoint":"GET /","ip":7}`, `field \"ip\" must be a string`},
		{"huge user", `{"endpoint":"GET /","ip":"1.2.3.4","user_id":"` + long + `"}`, `field \"user_id\" is longer than 256 bytes`},
		{"control device", `{"endpoint":"GET /","ip":"1.2.3.4","device_id":"a\u0001"}`, `field \"device_id\" contains a control character`},
		{"negative cost", `{"endpoint":"GET /","ip":"1.2.3.4","cost":-1}`, `field \"cost\" must not be negative`},
		{"fractional cost", `{"endpoint":"GET /","ip":"1.2.3.4","cost":1.5}`, `field \"cost\" must be a whole number`},
		{"huge cost", `{"endpoint":"GET /","ip":"1.2.3.4","cost":1e99}`, `field \"cost\" must be a whole number`},
		{"too large cost", `{"endpoint":"GET /","ip":"1.2.3.4","cost":1000001}`, `field \"cost\" must be between 0 and 1000000`},
		{"cost string", `{"endpoint":"GET /","ip":"1.2.3.4","cost":"1"}`, `field \"cost\" must be a number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expect(t, f.do(t, "POST", "/v1/check", tt.body), 400,
				`{"error":{"code":"BAD_REQUEST","message":"`+tt.msg+`","details":{},"request_id":"req-1"}}`)
		})
	}
	big := `{"endpoint":"GET /","ip":"1.2.3.4","account":"` + strings.Repeat("x", 70000) + `"}`
	expect(t, f.do(t, "POST", "/v1/check", big), 413,
		`{"error":{"code":"PAYLOAD_TOO_LARGE","message":"body is larger than 64 KiB","details":{},"request_id":"req-1"}}`)
	// chunked (no Content-Length) is cut at 64 KiB as well
	r := httptest.NewRequest("POST", "/v1/check", io.MultiReader(strings.NewReader(big)))
	r.ContentLength = -1
	w := httptest.NewRecorder()
	f.srv.ServeHTTP(w, r)
	if w.Code != 413 {
		t.Fatalf("chunked oversize: %d", w.Code)
	}
}

func TestRequestIDs(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "")
	w := f.do(t, "POST", "/v1/check", `{"endpoint":"GET /","ip":"1.2.3.4"}`, "X-Request-Id", "bad id<script>")
	id := w.Header().Get("X-Request-Id")
	if len(id) != 26 || !strings.Contains(w.Body.String(), `"request_id":"`+id+`"`) {
		t.Fatalf("an insane incoming id must be replaced by a ULID: %q %s", id, w.Body)
	}
	w = f.do(t, "POST", "/v1/check", `{"endpoint":"GET /","ip":"1.2.3.4"}`, "X-Request-Id", "edge-7f3a.1")
	if w.Header().Get("X-Request-Id") != "edge-7f3a.1" {
		t.Fatalf("a sane incoming id is kept: %q", w.Header().Get("X-Request-Id"))
	}
}

func TestNotFoundAndMethod(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "")
	expect(t, f.do(t, "GET", "/v1/check", ""), 405,
		`{"error":{"code":"METHOD_NOT_ALLOWED","message":"GET is not allowed here; use POST","details":{},"request_id":"req-1"}}`, "Allow", "POST")
	expect(t, f.do(t, "GET", "/nope", ""), 404,
		`{"error":{"code":"NOT_FOUND","message":"no such endpoint: GET /nope","details":{},"request_id":"req-1"}}`)
}

// TestAdminMethodNotAllowedAfterAuth: a wrong method on an admin path
// answers 404 when the admin API is off and 401 without the token, no
// Allow header in either (the admin methods are not revealed); 405 with
// Allow only with the token.
func TestAdminMethodNotAllowedAfterAuth(t *testing.T) {
	t.Parallel()
	const path = "/v1/admin/subjects/ip/1.2.3.4" // GET only
	off := newFixture(t, nil, "")
	w := off.do(t, "POST", path, "")
	expect(t, w, 404, `{"error":{"code":"NOT_FOUND","message":"the admin API is disabled (no admin token configured)","details":{},"request_id":"req-1"}}`)
	if a := w.Header().Values("Allow"); a != nil {
		t.Errorf("admin off: Allow %q", a)
	}
	f := newFixture(t, nil, "s3cret")
	for _, hdr := range [][]string{nil, {"Authorization", "Bearer s3cre"}} {
		w := f.do(t, "POST", path, "", hdr...)
		expect(t, w, 401, `{"error":{"code":"UNAUTHORIZED","message":"missing or wrong admin token","details":{},"request_id":"req-1"}}`)
		if a := w.Header().Values("Allow"); a != nil {
			t.Errorf("%v: Allow %q", hdr, a)
		}
	}
	expect(t, f.do(t, "POST", path, "", "Authorization", "Bearer s3cret"), 405,
		`{"error":{"code":"METHOD_NOT_ALLOWED","message":"POST is not allowed here; use GET","details":{},"request_id":"req-1"}}`, "Allow", "GET")
}

// failingStore fails every decision, as a dead Redis does.
type failingStore struct{ bucket.Store }

func (failingStore) Decide(context.Context, *bucket.Request, *bucket.Result) error {
	return errors.Join(bucket.ErrUnavailable, errors.New("dial tcp: connection refused"))
}

func TestFailureModes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, failingStore{bucket.NewMemoryStore(bucket.MemoryOptions{})}, "")
	// read fails open: 200 with the tightest limit's nominal numbers
	expect(t, f.do(t, "POST", "/v1/check", `{"endpoint":"GET /feed","ip":"203.0.113.9","user_id":"u_42"}`), 200,
		`{"allowed":true,"limit":300,"remaining":300,"reset":1713522600,"policy":"user-read","request_id":"req-1"}`,
		"X-RateLimit-Degraded", "1", "X-RateLimit-Limit", "300")
	// auth fails closed
	expect(t, f.do(t, "POST", "/v1/check", `{"endpoint":"POST /auth/login","ip":"203.0.113.9","account":"a"}`), 503,
		`{"error":{"code":"LIMITER_UNAVAILABLE","message":"Rate limiter unavailable","details":{"retry_after_ms":1000},"request_id":"req-1"}}`,
		"Retry-After", "1")
}

func TestLockAndStepUp(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "")
	ctx := context.Background()
	key := bucket.Subject{Kind: "account", ID: "alice"}
	if err := f.store.SetLock(ctx, key, bucket.Lock{Kind: "lockout", Rule: "account-failures", Until: t0.Add(15 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	login := `{"endpoint":"POST /auth/login","ip":"198.51.100.7","account":"alice"}`
	expect(t, f.do(t, "POST", "/v1/check", login), 429,
		`{"error":{"code":"ACCOUNT_LOCKED","message":"Account temporarily locked after repeated failed logins","details":{"retry_after_ms":900000,"rule":"account-failures","scope":"account"},"request_id":"req-1"}}`,
		"Retry-After", "900", "X-RateLimit-Limit", "0", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1713523500",
		"RateLimit-Policy", `"account-failures";q=0;w=900`, "RateLimit", `"account-failures";r=0;t=900`)
	// other routes are not locked
	expect(t, f.do(t, "POST", "/v1/check", `{"endpoint":"GET /feed","ip":"198.51.100.7","account":"alice"}`), 200, "")
	if err := f.store.SetLock(ctx, key, bucket.Lock{Kind: "step_up", Rule: "account-failures", Until: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	expect(t, f.do(t, "POST", "/v1/check", login), 403,
		`{"error":{"code":"STEP_UP_REQUIRED","message":"Additional verification required","details":{"rule":"account-failures","scope":"account","expires_at":"2024-04-19T11:30:00Z"},"request_id":"req-1"}}`)
}

func TestAdmin(t *testing.T) {
	t.Parallel()
	off := newFixture(t, nil, "")
	expect(t, off.do(t, "GET", "/v1/admin/subjects/ip/1.2.3.4", ""), 404, "")

	f := newFixture(t, nil, "s3cret")
	auth := []string{"Authorization", "Bearer s3cret"}
	expect(t, f.do(t, "GET", "/v1/admin/subjects/ip/1.2.3.4", ""), 401,
		`{"error":{"code":"UNAUTHORIZED","message":"missing or wrong admin token","details":{},"request_id":"req-1"}}`)
	expect(t, f.do(t, "GET", "/v1/admin/subjects/ip/1.2.3.4", "", "Authorization", "Bearer s3cre"), 401, "")
	expect(t, f.do(t, "GET", "/v1/admin/subjects/device/d1", "", auth...), 200,
		`{"subject":"device","id":"d1","effective":1,"multipliers":[],"lockout":null,"attestation":null,"request_id":"req-1"}`)
	expect(t, f.do(t, "PUT", "/v1/admin/multipliers/device/d1", `{"multiplier": 0.5, "ttl": "10m", "reason": "support ticket 7"}`, auth...), 200,
		`{"subject":"device","id":"d1","effective":0.5,"multipliers":[{"source":"admin","value":0.5,"expires_at":"2024-04-19T10:40:00Z","reason":"support ticket 7"}],"lockout":null,"attestation":null,"request_id":"req-1"}`)
	// the device limit (600/min) now has burst 300
	expect(t, f.do(t, "POST", "/v1/check", `{"endpoint":"POST /x","ip":"1.2.3.4","user_id":"u9","device_id":"d1"}`), 200, "",
		"X-RateLimit-Limit", "300", "X-RateLimit-Remaining", "299")
	expect(t, f.do(t, "DELETE", "/v1/admin/multipliers/device/d1", "", auth...), 200,
		`{"subject":"device","id":"d1","effective":1,"multipliers":[],"lockout":null,"attestation":null,"request_id":"req-1"}`)
	for _, tt := range []struct{ path, body, msg string }{
		{"/v1/admin/multipliers/planet/x", `{"multiplier":1}`, `subject \"planet\" is not one of ip, user, device, account, asn, attr:NAME`},
		{"/v1/admin/multipliers/ip/x", `{"multiplier":1}`, `id \"x\" is not an IP address`},
		{"/v1/admin/multipliers/asn/AS", `{"multiplier":1}`, `id \"AS\" is not an AS number (such as 64500 or AS64500)`},
		{"/v1/admin/multipliers/account/%20", `{"multiplier":1}`, `id is required`},
		{"/v1/admin/multipliers/device/x", `{}`, `field \"multiplier\" is required`},
		{"/v1/admin/multipliers/device/x", `{"multiplier":-1}`, `field \"multiplier\" must be between 0 and 1000`},
		{"/v1/admin/multipliers/device/x", `{"multiplier":1,"ttl":"soon"}`, `field \"ttl\" must be a positive duration such as \"10m\", at most 8760h`},
		{"/v1/admin/multipliers/device/x", `{"multiplier":1,"color":"red"}`, `unknown field \"color\"`},
		{"/v1/admin/multipliers/device/x", `{"multiplier":1,"reason":"` + strings.Repeat("r", 513) + `"}`, `field \"reason\" must be at most 512 bytes of printable UTF-8`},
		{"/v1/admin/multipliers/device/x", `{"multiplier":1,"reason":"tab\there"}`, `field \"reason\" must be at most 512 bytes of printable UTF-8`},
	} {
		expect(t, f.do(t, "PUT", tt.path, tt.body, auth...), 400,
			`{"error":{"code":"BAD_REQUEST","message":"`+tt.msg+`","details":{},"request_id":"req-1"}}`)
	}
	// a reason longer than an identifier's 256 bytes is fine up to 512
	long := strings.Repeat("r", 512)
	expect(t, f.do(t, "PUT", "/v1/admin/multipliers/device/x", `{"multiplier":1,"reason":"`+long+`"}`, auth...), 200,
		`{"subject":"device","id":"x","effective":1,"multipliers":[{"source":"admin","value":1,"expires_at":null,"reason":"`+long+`"}],"lockout":null,"attestation":null,"request_id":"req-1"}`)
	// lockouts
	_ = f.store.SetLock(context.Background(), bucket.Subject{Kind: "account", ID: "alice"}, bucket.Lock{Kind: "lockout", Rule: "r", Until: t0.Add(time.Minute)})
	expect(t, f.do(t, "GET", "/v1/admin/subjects/account/alice", "", auth...), 200,
		`{"subject":"account","id":"alice","effective":1,"multipliers":[],"lockout":{"kind":"lockout","rule":"r","expires_at":"2024-04-19T10:31:00Z"},"lockouts":[{"kind":"lockout","rule":"r","expires_at":"2024-04-19T10:31:00Z"}],"attestation":null,"trusted_devices":[],"request_id":"req-1"}`)
	expect(t, f.do(t, "DELETE", "/v1/admin/lockouts/alice", "", auth...), 200, `{"account":"alice","cleared":true,"request_id":"req-1"}`)
	expect(t, f.do(t, "DELETE", "/v1/admin/lockouts/alice", "", auth...), 200, `{"account":"alice","cleared":false,"request_id":"req-1"}`)
}

func TestAdminThrottlesFailedTokens(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "s3cret")
	for i := 0; i < 10; i++ {
		expect(t, f.do(t, "GET", "/v1/admin/subjects/ip/192.0.2.1", "", "Authorization", "Bearer guess"), 401, "")
	}
	// even the right token waits out the window now
	expect(t, f.do(t, "GET", "/v1/admin/subjects/ip/192.0.2.1", "", "Authorization", "Bearer s3cret"), 429, "", "Retry-After", "60")
	f.now = t0.Add(time.Minute)
	expect(t, f.do(t, "GET", "/v1/admin/subjects/ip/192.0.2.1", "", "Authorization", "Bearer s3cret"), 200, "")
}

// TestSignedInOutlastsThrottle: a console session's call (SignedIn) with
// the right token passes while its address is blocked; with a wrong one
// it is refused and counted like any other.
func TestSignedInOutlastsThrottle(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "s3cret")
	call := func(token string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/v1/admin/subjects/ip/192.0.2.1", nil).WithContext(SignedIn(context.Background()))
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		f.srv.ServeHTTP(w, r)
		return w
	}
	for range 9 {
		expect(t, f.do(t, "GET", "/v1/admin/subjects/ip/192.0.2.1", "", "Authorization", "Bearer guess"), 401, "")
	}
	if w := call("guess"); w.Code != http.StatusUnauthorized {
		t.Fatalf("a signed-in call with a wrong token: %d, want 401", w.Code)
	}
	expect(t, f.do(t, "GET", "/v1/admin/subjects/ip/192.0.2.1", "", "Authorization", "Bearer s3cret"), 429, "", "Retry-After", "60")
	if w := call("s3cret"); w.Code != http.StatusOK {
		t.Fatalf("a signed-in call with the right token from a blocked address: %d %s, want 200", w.Code, w.Body)
	}
}

func TestHealthAndMetrics(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "")
	expect(t, f.do(t, "GET", "/healthz", ""), 200, `{"status":"ok"}`)
	expect(t, f.do(t, "GET", "/readyz", ""), 200, `{"status":"ready","dependencies":{},"request_id":"req-1"}`)
	f.srv.SetState("draining")
	expect(t, f.do(t, "GET", "/readyz", ""), 503, "")
	f.do(t, "POST", "/v1/check", `{"endpoint":"GET /feed","ip":"203.0.113.9","user_id":"u_42"}`)
	w := f.do(t, "GET", "/metrics", "")
	for _, want := range []string{
		`tollgate_decisions_total{class="read",limit="user-read",result="allowed"} 1`,
		`tollgate_tokens_remaining_ratio_bucket{limit="user-read",le="1"} 1`,
		`tollgate_decision_seconds_count 1`,
		`tollgate_store_errors_total 0`,
	} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestPanicsBecome500(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "")
	f.srv.Handle("GET /boom", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	expect(t, f.do(t, "GET", "/boom", ""), 500, `{"error":{"code":"INTERNAL","message":"internal error","details":{},"request_id":"req-1"}}`)
}

// field returns the first value of the header field named exactly name
// (no canonicalisation): Tollgate writes the rate-limit fields in the
// contract's spelling (X-RateLimit-Limit, RateLimit), which Header.Get on a
// handler's own map would not find.
func field(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}
