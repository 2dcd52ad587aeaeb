package middleware_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/middleware"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/service"
)

// smallPolicy allows 3 requests a minute per IP (one token every 20 s).
const smallPolicy = `version: 1
limits:
  - {name: ip-small, by: [ip], rate: 3/min}
`

// app is the embedding API: it counts the calls that reach it.
type app struct{ calls atomic.Int32 }

func (a *app) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.calls.Add(1)
	_, _ = io.WriteString(w, "ok")
}

// identify limits by peer address, user and device headers; /healthz is
// not limited.
func identify(r *http.Request) (middleware.Identity, bool) {
	if r.URL.Path == "/healthz" {
		return middleware.Identity{}, false
	}
	return middleware.Identity{
		IP:       middleware.RemoteIP(nil)(r),
		UserID:   r.Header.Get("X-User-Id"),
		DeviceID: r.Header.Get("X-Device-Id"),
		Account:  r.Header.Get("X-Account"),
	}, true
}

// serve sends one request through h from ip with request id rid.
func serve(h http.Handler, method, path, ip, rid string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = net.JoinHostPort(ip, "50000")
	if rid != "" {
		r.Header.Set("X-Request-Id", rid)
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// build wraps a fresh app with the middleware o describes.
func build(t *testing.T, o middleware.Options) (http.Handler, *app) {
	t.Helper()
	if o.Identify == nil {
		o.Identify = identify
	}
	mw, err := middleware.New(o)
	if err != nil {
		t.Fatal(err)
	}
	a := &app{}
	return mw(a), a
}

// directEngine returns an engine over a memory store whose clock stands
// still at now.
func directEngine(t *testing.T, text string, now time.Time) *engine.Engine {
	t.Helper()
	p, err := policy.Parse("p.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	clock := func() time.Time { return now }
	e, err := engine.New(engine.Options{
		Store:  bucket.NewMemoryStore(bucket.MemoryOptions{Now: clock}),
		Policy: func() *policy.Policy { return p },
		Clock:  clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// checkLimited runs the shared expectations of both modes against h:
// three requests pass with the headers, the fourth gets the 429 envelope
// and does not reach the app, another IP and /healthz still pass. It
// returns the 429 response.
func checkLimited(t *testing.T, h http.Handler, a *app, ip string) *httptest.ResponseRecorder {
	t.Helper()
	for i := 1; i <= 3; i++ {
		rid := "req-" + strconv.Itoa(i)
		w := serve(h, "GET", "/v1/items", ip, rid)
		if w.Code != 200 || w.Body.String() != "ok" {
			t.Fatalf("request %d: %d %q, want 200 ok", i, w.Code, w.Body)
		}
		hd := w.Header()
		want := map[string]string{
			"X-RateLimit-Limit":     "3",
			"X-RateLimit-Remaining": strconv.Itoa(3 - i),
			"RateLimit-Policy":      `"ip-small";q=3;w=60`,
			"X-Request-Id":          rid,
		}
		for k, v := range want {
			if got := field(hd, k); got != v {
				t.Errorf("request %d: %s = %q, want %q", i, k, got, v)
			}
		}
		if got := field(hd, "RateLimit"); !strings.HasPrefix(got, `"ip-small";r=`+strconv.Itoa(3-i)+";t=") {
			t.Errorf("request %d: RateLimit = %q", i, got)
		}
		if field(hd, "X-RateLimit-Reset") == "" || field(hd, "Retry-After") != "" || field(hd, "X-RateLimit-Degraded") != "" {
			t.Errorf("request %d: headers %v", i, hd)
		}
	}
	if n := a.calls.Load(); n != 3 {
		t.Fatalf("app calls %d, want 3", n)
	}

	w := serve(h, "GET", "/v1/items", ip, "req-4")
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("request 4: status %d, want 429; body %s", w.Code, w.Body)
	}
	if n := a.calls.Load(); n != 3 {
		t.Errorf("the app was called for the limited request (calls %d)", n)
	}
	hd := w.Header()
	for k, v := range map[string]string{
		"Content-Type": "application/json", "X-Request-Id": "req-4", "Retry-After": "20",
		"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "RateLimit-Policy": `"ip-small";q=3;w=60`,
	} {
		if got := field(hd, k); got != v {
			t.Errorf("429: %s = %q, want %q", k, got, v)
		}
	}
	if got := field(hd, "RateLimit"); !strings.HasPrefix(got, `"ip-small";r=0;t=`) {
		t.Errorf("429: RateLimit = %q", got)
	}
	if cl := field(hd, "Content-Length"); cl != strconv.Itoa(w.Body.Len()) {
		t.Errorf("429: Content-Length %q for %d bytes", cl, w.Body.Len())
	}
	// The body is exactly the envelope.
	var env map[string]map[string]json.RawMessage
	if err := json.Unmarshal(w.Body.Bytes(), &env); err != nil || len(env) != 1 || env["error"] == nil {
		t.Fatalf("429 body %s is not exactly the envelope (%v)", w.Body, err)
	}
	e := env["error"]
	if keys := sortedKeys(e); !slices.Equal(keys, []string{"code", "details", "message", "request_id"}) {
		t.Errorf("error keys %v", keys)
	}
	if string(e["code"]) != `"RATE_LIMITED"` || string(e["message"]) != `"Too many requests"` || string(e["request_id"]) != `"req-4"` {
		t.Errorf("envelope %s", w.Body)
	}
	var details map[string]json.RawMessage
	_ = json.Unmarshal(e["details"], &details)
	if keys := sortedKeys(details); !slices.Equal(keys, []string{"limit", "retry_after_ms", "scope"}) {
		t.Errorf("details keys %v", keys)
	}
	ms, _ := strconv.Atoi(string(details["retry_after_ms"]))
	if string(details["limit"]) != `"ip-small"` || string(details["scope"]) != `"ip"` || ms <= 19000 || ms > 20000 {
		t.Errorf("details %s", e["details"])
	}

	// Another client is not affected; unlimited paths skip the limiter.
	if w := serve(h, "GET", "/v1/items", "203.0.113.200", ""); w.Code != 200 || field(w.Header(), "X-RateLimit-Remaining") != "2" {
		t.Errorf("another IP: %d remaining %q", w.Code, field(w.Header(), "X-RateLimit-Remaining"))
	}
	if w := serve(h, "GET", "/healthz", ip, ""); w.Code != 200 || field(w.Header(), "X-RateLimit-Limit") != "" || w.Header().Get("X-Request-Id") != "" {
		t.Errorf("skipped request: %d headers %v", w.Code, w.Header())
	}
	return w
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func TestDirect(t *testing.T) {
	t.Parallel()
	now := time.Unix(1713522600, 0)
	h, a := build(t, middleware.Options{Engine: directEngine(t, smallPolicy, now)})
	w := checkLimited(t, h, a, "198.51.100.7")
	// The clock stands still: every number is exact.
	want := `{"error":{"code":"RATE_LIMITED","message":"Too many requests","details":{"retry_after_ms":20000,"limit":"ip-small","scope":"ip"},"request_id":"req-4"}}` + "\n"
	if w.Body.String() != want {
		t.Errorf("429 body\n%s\nwant\n%s", w.Body, want)
	}
	if got := field(w.Header(), "X-RateLimit-Reset"); got != "1713522660" {
		t.Errorf("X-RateLimit-Reset %s, want 1713522660", got)
	}
	if got := field(w.Header(), "RateLimit"); got != `"ip-small";r=0;t=60` {
		t.Errorf("RateLimit %s", got)
	}
}

func TestDirectHeadersExact(t *testing.T) {
	t.Parallel()
	now := time.Unix(1713522600, 0)
	h, _ := build(t, middleware.Options{Engine: directEngine(t, smallPolicy, now)})
	w := serve(h, "GET", "/", "198.51.100.7", "")
	want := map[string]string{
		"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "1713522620",
		"RateLimit-Policy": `"ip-small";q=3;w=60`, "RateLimit": `"ip-small";r=2;t=20`,
	}
	for k, v := range want {
		if got := w.Header()[k]; len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if len(w.Header().Get("X-Request-Id")) != 26 {
		t.Errorf("X-Request-Id %q is not a new ULID", w.Header().Get("X-Request-Id"))
	}
}

func TestDirectCost(t *testing.T) {
	t.Parallel()
	now := time.Unix(1713522600, 0)
	cases := []struct {
		name          string
		cost          int
		wantRemaining string
	}{
		{"two", 2, "1"},
		{"zero peeks", 0, "3"},
		{"negative counts as one", -5, "2"},
		{"above the burst is denied", 4, "3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h, _ := build(t, middleware.Options{Engine: directEngine(t, smallPolicy, now), Cost: func(*http.Request) int { return c.cost }})
			w := serve(h, "POST", "/upload", "198.51.100.7", "")
			if got := field(w.Header(), "X-RateLimit-Remaining"); got != c.wantRemaining {
				t.Errorf("remaining %q, want %q (status %d)", got, c.wantRemaining, w.Code)
			}
		})
	}
}

func TestIdentityRefused(t *testing.T) {
	t.Parallel()
	now := time.Unix(1713522600, 0)
	cases := []struct {
		name    string
		id      middleware.Identity
		wantMsg string
	}{
		{"no ip", middleware.Identity{}, "identity: the client IP is missing"},
		{"bad ip", middleware.Identity{IP: "not-an-ip"}, `identity: the client IP "not-an-ip" is not an IP address`},
		{"long device", middleware.Identity{IP: "192.0.2.1", DeviceID: strings.Repeat("d", 257)}, "identity: the device id is longer than 256 bytes"},
		{"control in user", middleware.Identity{IP: "192.0.2.1", UserID: "u\n1"}, "identity: the user id contains a control character"},
		{"bad utf-8 account", middleware.Identity{IP: "192.0.2.1", Account: "a\xff"}, "identity: the account is not valid UTF-8"},
		// 128 x U+023A is 256 bytes, lower-cased (U+2C65) 384: the check API refuses it
		{"account growing when lower-cased", middleware.Identity{IP: "192.0.2.1", Account: strings.Repeat("\u023a", 128)},
			"identity: the account is longer than 256 bytes"},
		{"bad attribute name", middleware.Identity{IP: "192.0.2.1", Attributes: map[string]string{"plan": "x", "Tier": "y"}},
			`identity: attribute "Tier" is not a valid attribute name (want 1-32 characters of a-z 0-9 _)`},
		{"long attribute", middleware.Identity{IP: "192.0.2.1", Attributes: map[string]string{"plan": strings.Repeat("p", 257)}},
			`identity: attribute "plan" is longer than 256 bytes`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h, a := build(t, middleware.Options{Engine: directEngine(t, smallPolicy, now),
				Identify: func(*http.Request) (middleware.Identity, bool) { return c.id, true }})
			w := serve(h, "GET", "/", "192.0.2.1", "rid-1")
			msg, _ := json.Marshal(c.wantMsg)
			want := `{"error":{"code":"BAD_REQUEST","message":` + string(msg) + `,"details":{},"request_id":"rid-1"}}` + "\n"
			if w.Code != 400 || w.Body.String() != want || a.calls.Load() != 0 {
				t.Errorf("%d %s, want 400 %s", w.Code, w.Body, want)
			}
		})
	}
}

// recorder is a transport that keeps the limiter's last raw answer.
type recorder struct {
	base http.RoundTripper
	mu   sync.Mutex
	last []byte
}

func (rc *recorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := rc.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	rc.mu.Lock()
	rc.last = b
	rc.mu.Unlock()
	return resp, err
}

// startLimiter runs the whole limiter in process with policy text.
func startLimiter(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r, err := service.Start(ctx, service.Config{ConfigPath: path, Listen: "127.0.0.1:0", NoForwardAuth: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		<-r.Done
	})
	return "http://" + r.Addr
}

func TestRemote(t *testing.T) {
	t.Parallel()
	base := startLimiter(t, smallPolicy)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	rec := &recorder{base: tr}
	// A generous timeout: the race detector slows the limiter down.
	h, a := build(t, middleware.Options{LimiterURL: base + "/", HTTPClient: &http.Client{Transport: rec}, Timeout: 5 * time.Second})
	checkLimited(t, h, a, "198.51.100.7")
	// The 429 reaches the app's client byte for byte as the limiter wrote it.
	w := serve(h, "GET", "/v1/items", "198.51.100.7", "req-5")
	rec.mu.Lock()
	last := rec.last
	rec.mu.Unlock()
	if w.Code != 429 || !bytes.Equal(w.Body.Bytes(), last) {
		t.Errorf("429 not relayed verbatim:\n%s\nlimiter said\n%s", w.Body, last)
	}
	if !strings.Contains(w.Body.String(), `"request_id":"req-5"`) {
		t.Errorf("the request id did not reach the limiter: %s", w.Body)
	}
}

// fakeLimiter is a loopback /v1/check that answers with a fixed reply and
// records what it was asked.
type fakeLimiter struct {
	status int
	header map[string]string
	body   string
	hang   bool

	mu   sync.Mutex
	reqs []fakeReq
}

type fakeReq struct {
	path, body string
	header     http.Header
}

func (f *fakeLimiter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.reqs = append(f.reqs, fakeReq{r.URL.Path, string(b), r.Header.Clone()})
	f.mu.Unlock()
	if f.hang {
		<-r.Context().Done()
		return
	}
	for k, v := range f.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(f.status)
	_, _ = io.WriteString(w, f.body)
}

func startFake(t *testing.T, f *fakeLimiter) string {
	t.Helper()
	hs := httptest.NewServer(f)
	t.Cleanup(hs.Close)
	return hs.URL
}

func TestRemoteAllowed(t *testing.T) {
	t.Parallel()
	f := &fakeLimiter{status: 200, header: map[string]string{
		"X-RateLimit-Limit": "300", "X-RateLimit-Remaining": "299", "X-RateLimit-Reset": "1713522660",
		"RateLimit-Policy": `"user-read";q=300;w=60`, "RateLimit": `"user-read";r=299;t=1`,
		"X-RateLimit-Degraded": "1", "X-Internal": "secret", "Content-Type": "application/json",
	}, body: `{"allowed":true}`}
	url := startFake(t, f)
	h, a := build(t, middleware.Options{LimiterURL: url, Timeout: 5 * time.Second, Cost: func(*http.Request) int { return 2 }})
	w := serve(h, "GET", "/v1/items/a%20b", "::ffff:198.51.100.7", "rid-1",
		"X-User-Id", "u_42", "X-Device-Id", "d_1", "X-Account", `al"ice`)
	if w.Code != 200 || w.Body.String() != "ok" || a.calls.Load() != 1 {
		t.Fatalf("%d %q calls %d", w.Code, w.Body, a.calls.Load())
	}
	for _, k := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit", "X-RateLimit-Degraded"} {
		if got, want := field(w.Header(), k), f.header[k]; got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if w.Header().Get("X-Internal") != "" || w.Header().Get("Content-Type") == "application/json" {
		t.Errorf("copied more than the rate-limit headers: %v", w.Header())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) != 1 {
		t.Fatalf("%d checks", len(f.reqs))
	}
	got := f.reqs[0]
	want := `{"endpoint":"GET /v1/items/a%20b","ip":"198.51.100.7","user_id":"u_42","device_id":"d_1","account":"al\"ice","cost":2}`
	if got.path != "/v1/check" || got.body != want {
		t.Errorf("check %s %s\nwant /v1/check %s", got.path, got.body, want)
	}
	if got.header.Get("X-Request-Id") != "rid-1" || got.header.Get("Content-Type") != "application/json" || got.header.Get("Authorization") != "" {
		t.Errorf("check headers %v", got.header)
	}
}

// TestRemoteAPIToken: with APIToken the remote check carries it (the
// limiter's --api-token, contract 6.2).
func TestRemoteAPIToken(t *testing.T) {
	t.Parallel()
	f := &fakeLimiter{status: 200, body: `{"allowed":true}`}
	h, _ := build(t, middleware.Options{LimiterURL: startFake(t, f), APIToken: "s3cret", Timeout: 5 * time.Second})
	if w := serve(h, "GET", "/x", "198.51.100.7", "rid-1"); w.Code != 200 {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) != 1 || f.reqs[0].header.Get("Authorization") != "Bearer s3cret" {
		t.Fatalf("checks %+v", f.reqs)
	}
}

func TestRemoteRelaysDenials(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		status int
		header map[string]string
		body   string
	}{
		{"step-up", 403, map[string]string{"Content-Type": "application/json", "X-Request-Id": "rid-1"},
			`{"error":{"code":"STEP_UP_REQUIRED","message":"Additional verification required","details":{"rule":"r","scope":"account","expires_at":"2025-04-19T10:15:00Z"},"request_id":"rid-1"}}` + "\n"},
		{"locked", 429, map[string]string{"Content-Type": "application/json", "X-Request-Id": "rid-1", "Retry-After": "900",
			"X-RateLimit-Limit": "0", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1713523500"},
			`{"error":{"code":"ACCOUNT_LOCKED","message":"Account temporarily locked after repeated failed logins","details":{"retry_after_ms":900000,"rule":"r","scope":"account"},"request_id":"rid-1"}}` + "\n"},
		{"limiter's own 503 is relayed even when failing open", 503, map[string]string{"Content-Type": "application/json", "X-Request-Id": "rid-1", "Retry-After": "1"},
			`{"error":{"code":"LIMITER_UNAVAILABLE","message":"Rate limiter unavailable","details":{"retry_after_ms":1000},"request_id":"rid-1"}}` + "\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := startFake(t, &fakeLimiter{status: c.status, header: c.header, body: c.body})
			h, a := build(t, middleware.Options{LimiterURL: url, FailOpen: true, Timeout: 5 * time.Second})
			w := serve(h, "POST", "/auth/login", "198.51.100.7", "rid-1", "X-Account", "alice")
			if w.Code != c.status || w.Body.String() != c.body || a.calls.Load() != 0 {
				t.Errorf("%d %q calls %d; want %d verbatim", w.Code, w.Body, a.calls.Load(), c.status)
			}
			for k, v := range c.header {
				if got := field(w.Header(), k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if field(w.Header(), "X-RateLimit-Degraded") != "" {
				t.Error("a relayed denial is not degraded")
			}
		})
	}
}

// TestRemoteIdentityRefused: in remote mode too, an identity the check
// API would refuse is the middleware's own 400, before the limiter is
// asked: an account that grows past 256 bytes when lower-cased never
// reaches the limiter's 400, which FailOpen must not turn into a pass.
func TestRemoteIdentityRefused(t *testing.T) {
	t.Parallel()
	f := &fakeLimiter{status: 200, body: `{"allowed":true}`}
	h, a := build(t, middleware.Options{LimiterURL: startFake(t, f), FailOpen: true, Timeout: 5 * time.Second})
	w := serve(h, "POST", "/auth/login", "198.51.100.7", "rid-1", "X-Account", strings.Repeat("\u023a", 128))
	want := `{"error":{"code":"BAD_REQUEST","message":"identity: the account is longer than 256 bytes","details":{},"request_id":"rid-1"}}` + "\n"
	if w.Code != 400 || w.Body.String() != want || a.calls.Load() != 0 {
		t.Errorf("%d %q calls %d, want 400 %s", w.Code, w.Body, a.calls.Load(), want)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) != 0 {
		t.Errorf("the limiter was asked: %+v", f.reqs)
	}
}

// TestPaddedAccountIsItsName: an account's length is judged once
// normalised, as the check API and Envoy's account entry judge it: an
// app trims the white space that pads "frank" past 256 bytes and logs
// frank in, so the middleware limits it as frank. It answered 400
// instead, refusing a login the check API would have taken as frank's.
func TestPaddedAccountIsItsName(t *testing.T) {
	t.Parallel()
	padded := "  Frank" + strings.Repeat(" ", 300)
	f := &fakeLimiter{status: 200, body: `{"allowed":true}`}
	h, a := build(t, middleware.Options{LimiterURL: startFake(t, f), Timeout: 5 * time.Second})
	w := serve(h, "POST", "/auth/login", "198.51.100.7", "rid-1", "X-Account", padded)
	f.mu.Lock()
	defer f.mu.Unlock()
	if w.Code != 200 || a.calls.Load() != 1 || len(f.reqs) != 1 || !strings.Contains(f.reqs[0].body, `"account":"frank"`) {
		t.Fatalf("remote: %d %q, app calls %d, limiter asked %+v; want 200 with account frank", w.Code, w.Body, a.calls.Load(), f.reqs)
	}
}

// TestRemoteBadRequest: the limiter's 400 is the caller's bad input, not
// the limiter's unavailability: it is answered 400 (the limiter's
// envelope verbatim, or the middleware's own when it sent none), and the
// request never reaches the app, even with FailOpen.
func TestRemoteBadRequest(t *testing.T) {
	t.Parallel()
	envelope := `{"error":{"code":"BAD_REQUEST","message":"field \"account\" is longer than 256 bytes","details":{},"request_id":"rid-1"}}` + "\n"
	own := `{"error":{"code":"BAD_REQUEST","message":"the rate limiter refused this request's identity","details":{},"request_id":"rid-1"}}` + "\n"
	cases := []struct {
		name, body, want string
	}{
		{"envelope", envelope, envelope},
		{"no envelope", "400 Bad Request", own},
	}
	for _, c := range cases {
		for _, open := range []bool{true, false} {
			t.Run(c.name+"/fail_open="+strconv.FormatBool(open), func(t *testing.T) {
				t.Parallel()
				url := startFake(t, &fakeLimiter{status: 400, header: map[string]string{"Content-Type": "application/json", "X-Request-Id": "rid-1"}, body: c.body})
				h, a := build(t, middleware.Options{LimiterURL: url, FailOpen: open, Timeout: 5 * time.Second})
				w := serve(h, "GET", "/v1/items", "198.51.100.7", "rid-1")
				if w.Code != 400 || w.Body.String() != c.want || a.calls.Load() != 0 || field(w.Header(), "X-RateLimit-Degraded") != "" ||
					w.Header().Get("Content-Type") != "application/json" || w.Header().Get("X-Request-Id") != "rid-1" {
					t.Errorf("%d %q calls %d headers %v; want 400 %s", w.Code, w.Body, a.calls.Load(), w.Header(), c.want)
				}
			})
		}
	}
}

// TestRemoteDown: when the limiter cannot answer, FailOpen decides.
func TestRemoteDown(t *testing.T) {
	t.Parallel()
	closedURL := "http://" + testenv.RefusedAddr(t)

	cases := []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"connection refused", func(*testing.T) string { return closedURL }},
		{"timeout", func(t *testing.T) string { return startFake(t, &fakeLimiter{hang: true}) }},
		{"500", func(t *testing.T) string { return startFake(t, &fakeLimiter{status: 500, body: "boom"}) }},
		{"502 from a load balancer", func(t *testing.T) string { return startFake(t, &fakeLimiter{status: 502}) }},
		{"503 without an envelope", func(t *testing.T) string {
			return startFake(t, &fakeLimiter{status: 503, header: map[string]string{"Retry-After": "30"}, body: "no healthy upstream"})
		}},
		{"429 without an envelope", func(t *testing.T) string { return startFake(t, &fakeLimiter{status: 429, body: "slow down"}) }},
		{"redirect", func(t *testing.T) string {
			return startFake(t, &fakeLimiter{status: 302, header: map[string]string{"Location": "http://example.test/"}})
		}},
	}
	for _, c := range cases {
		for _, open := range []bool{true, false} {
			t.Run(c.name+"/fail_open="+strconv.FormatBool(open), func(t *testing.T) {
				t.Parallel()
				h, a := build(t, middleware.Options{LimiterURL: c.url(t), FailOpen: open, Timeout: 50 * time.Millisecond})
				w := serve(h, "GET", "/v1/items", "198.51.100.7", "rid-1")
				if open {
					if w.Code != 200 || w.Body.String() != "ok" || a.calls.Load() != 1 || field(w.Header(), "X-RateLimit-Degraded") != "1" {
						t.Errorf("fail open: %d %q calls %d headers %v", w.Code, w.Body, a.calls.Load(), w.Header())
					}
					return
				}
				want := `{"error":{"code":"LIMITER_UNAVAILABLE","message":"Rate limiter unavailable","details":{"retry_after_ms":1000},"request_id":"rid-1"}}` + "\n"
				if w.Code != 503 || w.Body.String() != want || a.calls.Load() != 0 || w.Header().Get("Retry-After") != "1" ||
					w.Header().Get("X-Request-Id") != "rid-1" {
					t.Errorf("fail closed: %d %q calls %d headers %v", w.Code, w.Body, a.calls.Load(), w.Header())
				}
			})
		}
	}
}

// TestRemoteCallerGone: when the caller's context ends, nothing is
// answered and the app is not called.
func TestRemoteCallerGone(t *testing.T) {
	t.Parallel()
	url := startFake(t, &fakeLimiter{hang: true})
	h, a := build(t, middleware.Options{LimiterURL: url, FailOpen: true, Timeout: 5 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequest("GET", "/v1/items", nil).WithContext(ctx)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if a.calls.Load() != 0 || w.Body.Len() != 0 || field(w.Header(), "X-RateLimit-Degraded") != "" {
		t.Errorf("calls %d body %q headers %v", a.calls.Load(), w.Body, w.Header())
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	eng := directEngine(t, smallPolicy, time.Now())
	cases := []struct {
		name    string
		o       middleware.Options
		wantErr error
	}{
		{"direct", middleware.Options{Engine: eng, Identify: identify}, nil},
		{"remote", middleware.Options{LimiterURL: "http://127.0.0.1:8080", Identify: identify}, nil},
		{"no identify", middleware.Options{Engine: eng}, middleware.ErrNoIdentify},
		{"neither mode", middleware.Options{Identify: identify}, middleware.ErrMode},
		{"both modes", middleware.Options{Engine: eng, LimiterURL: "http://x", Identify: identify}, middleware.ErrMode},
		{"bad scheme", middleware.Options{LimiterURL: "ftp://x", Identify: identify}, middleware.ErrLimiterURL},
		{"no host", middleware.Options{LimiterURL: "http://", Identify: identify}, middleware.ErrLimiterURL},
		{"not a url", middleware.Options{LimiterURL: "127.0.0.1:8080", Identify: identify}, middleware.ErrLimiterURL},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			mw, err := middleware.New(c.o)
			if !errors.Is(err, c.wantErr) || (err == nil) != (mw != nil) {
				t.Errorf("New = %v, want %v", err, c.wantErr)
			}
		})
	}
}

func TestEndpoint(t *testing.T) {
	t.Parallel()
	long := "/" + strings.Repeat("é", 1100)
	cases := []struct {
		name, method, target, want string
	}{
		{"plain", "GET", "/v1/items/42?x=1", "GET /v1/items/42"},
		{"space escaped", "GET", "/a%20b", "GET /a%20b"},
		{"control escaped", "POST", "/a%0Ab", "POST /a%0Ab"},
		{"utf-8 kept", "GET", "/caf%C3%A9", "GET /café"},
		{"asterisk", "OPTIONS", "*", "OPTIONS /*"},
		{"long cut on a rune", "GET", long, ("GET " + long)[:2047]},
	}
	for _, c := range cases {
		r := httptest.NewRequest(c.method, "http://example.test/", nil)
		r.URL.Path, r.URL.RawPath = "", ""
		if c.target == "*" {
			r.URL.Path = "*"
		} else {
			r = httptest.NewRequest(c.method, c.target, nil)
		}
		if got := middleware.Endpoint(r); got != c.want {
			t.Errorf("%s: Endpoint = %q, want %q", c.name, clipS(got), clipS(c.want))
		}
	}
}

func clipS(s string) string {
	if len(s) > 40 {
		return s[:40] + "...(" + strconv.Itoa(len(s)) + " bytes)"
	}
	return s
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

// TestRemoteDownFailsAccountsClosed: with FailOpen, a request naming an
// account (a login) still fails closed when the limiter cannot answer,
// unless FailOpenAccounts is set; one without an account fails open.
func TestRemoteDownFailsAccountsClosed(t *testing.T) {
	t.Parallel()
	closedURL := "http://" + testenv.RefusedAddr(t)
	for _, c := range []struct {
		name         string
		openAccounts bool
		account      string
		want         int
	}{
		{"login fails closed", false, "alice", 503},
		{"no account fails open", false, "", 200},
		{"login fails open with FailOpenAccounts", true, "alice", 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h, a := build(t, middleware.Options{LimiterURL: closedURL, FailOpen: true, FailOpenAccounts: c.openAccounts, Timeout: 50 * time.Millisecond})
			var hdr []string
			if c.account != "" {
				hdr = []string{"X-Account", c.account}
			}
			w := serve(h, "POST", "/auth/login", "198.51.100.7", "rid-1", hdr...)
			if w.Code != c.want || (c.want == 503) != (a.calls.Load() == 0) {
				t.Errorf("%d %q, app calls %d; want %d", w.Code, w.Body, a.calls.Load(), c.want)
			}
			if c.want == 503 && (!strings.Contains(w.Body.String(), `"code":"LIMITER_UNAVAILABLE"`) || w.Header().Get("Retry-After") != "1") {
				t.Errorf("fail closed: %q headers %v", w.Body, w.Header())
			}
		})
	}
}

// TestLongPathRefused: a request whose endpoint is over the check API's
// 2048 bytes is refused (400) in direct mode too, and the app is not
// called: its cut form could match another route.
func TestLongPathRefused(t *testing.T) {
	t.Parallel()
	h, a := build(t, middleware.Options{Engine: directEngine(t, "version: 1\nlimits:\n  - {name: all, by: [ip], rate: 10/min}\n", time.Now())})
	w := serve(h, "GET", "/files/"+strings.Repeat("a", 2100)+".zip", "198.51.100.7", "")
	if w.Code != 400 || !strings.Contains(w.Body.String(), `"code":"BAD_REQUEST"`) || a.calls.Load() != 0 {
		t.Fatalf("long path: %d %q, app calls %d", w.Code, w.Body, a.calls.Load())
	}
	if w := serve(h, "GET", "/files/"+strings.Repeat("a", 2030), "198.51.100.7", ""); w.Code != 200 {
		t.Fatalf("a path within the bound: %d %q", w.Code, w.Body)
	}
}
