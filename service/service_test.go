package service

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

func start(t *testing.T, cfg Config) (*Running, string) { return startB(t, cfg) }

func startB(t testing.TB, cfg Config) (*Running, string) {
	t.Helper()
	if cfg.NATSURL != "" && cfg.DecisionsMaxBytes == 0 {
		cfg.DecisionsMaxBytes = 16 << 20 // streams reserve storage on the shared server
	}
	if cfg.NATSURL != "" && cfg.EventsMaxBytes == 0 {
		cfg.EventsMaxBytes = 16 << 20
	}
	if cfg.Upstream != "" && cfg.APIListen == "" {
		cfg.APIListen = "127.0.0.1:0"
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.RedisURL != "" && cfg.NATSURL == "" && cfg.NATSStoreDir == "" {
		cfg.NATSStoreDir = t.TempDir() // not the user's cache dir
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	if cfg.Getenv == nil {
		cfg.Getenv = testGetenv
	}
	if os.Getenv("TG_DEBUG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	r, err := Start(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		<-r.Done
	})
	return r, "http://" + r.Addr
}

// testGetenv is the tests' environment: the built-in policy's
// user-signature key is set (proxy mode refuses to start without it).
func testGetenv(k string) string {
	if k == "TOLLGATE_USER_KEY" {
		return "test-user-key"
	}
	return os.Getenv(k)
}

// client is the tests' HTTP client. Not http.DefaultClient: closing an
// httptest server (as parallel tests do) closes the idle connections of
// http.DefaultTransport, which can break a request another test has on one.
var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// reportFailedLogins reports n failed logins of account to base's
// /v1/report, each of which must be accepted (202).
func reportFailedLogins(t *testing.T, base, account string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if resp, body := post(t, base+"/v1/report", `{"type":"login_failed","account":"`+account+`"}`); resp.StatusCode != 202 {
			t.Fatalf("report: %d %s", resp.StatusCode, body)
		}
	}
}

// loginLocked reports whether a login check of account from 198.51.100.7
// is answered 429.
func loginLocked(t *testing.T, base, account string) bool {
	t.Helper()
	resp, _ := post(t, base+"/v1/check", `{"endpoint":"POST /auth/login","ip":"198.51.100.7","account":"`+account+`"}`)
	return resp.StatusCode == 429
}

func get(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// eventually polls f until it returns "" or the deadline passes.
func eventually(t testing.TB, d time.Duration, f func() string) {
	t.Helper()
	testenv.Eventually(t, d, f)
}

func TestOneProcessDefault(t *testing.T) {
	t.Parallel()
	r, base := start(t, Config{})
	resp, body := post(t, base+"/v1/check", `{"endpoint":"POST /auth/login","ip":"198.51.100.7","account":"alice"}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"policy":"login-account"`) || resp.Header.Get("X-RateLimit-Limit") != "5" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	code, body := get(t, base+"/readyz")
	if code != 200 || !strings.HasPrefix(body, `{"status":"ready","dependencies":{"nats":"up","redis":"disabled"}`) {
		t.Fatalf("readyz %d %s", code, body)
	}
	code, body = get(t, base+"/metrics")
	if code != 200 || !strings.Contains(body, `tollgate_decisions_total{class="auth",limit="login-account",result="allowed"} 1`) {
		t.Fatalf("metrics %d", code)
	}
	_ = r
}

func TestRedisStoreEndToEnd(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	_, base := start(t, Config{RedisURL: "redis://" + srv.Addr + "/0"})
	for i := 4; i >= 0; i-- {
		resp, _ := post(t, base+"/v1/check", `{"endpoint":"POST /auth/login","ip":"198.51.100.7","account":"alice"}`)
		if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != itoa(i) {
			t.Fatalf("request %d: %d remaining %s", 5-i, resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
		}
	}
	resp, body := post(t, base+"/v1/check", `{"endpoint":"POST /auth/login","ip":"198.51.100.7","account":"alice"}`)
	if resp.StatusCode != 429 || !strings.Contains(body, `"code":"RATE_LIMITED"`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	code, body := get(t, base+"/readyz")
	if code != 200 || !strings.Contains(body, `"redis":"up"`) {
		t.Fatalf("readyz %d %s", code, body)
	}
}

// TestRedisOutage kills Redis under the service: fail-open classes answer
// 200 degraded, fail-closed ones 503, nobody waits past the deadline, the
// breaker opens, and decisions are normal again soon after Redis returns.
func TestRedisOutage(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	_, base := start(t, Config{RedisURL: "redis://" + srv.Addr + "/0", StoreTimeout: 100 * time.Millisecond})
	read := `{"endpoint":"GET /feed","ip":"192.0.2.9","user_id":"u_42"}`
	login := `{"endpoint":"POST /auth/login","ip":"192.0.2.9","account":"alice"}`
	if resp, _ := post(t, base+"/v1/check", read); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Degraded") != "" {
		t.Fatalf("before: %d", resp.StatusCode)
	}
	srv.Stop()
	for i := 0; i < 20; i++ {
		t0 := time.Now()
		resp, _ := post(t, base+"/v1/check", read)
		if took := time.Since(t0); took > time.Second {
			t.Fatalf("a request waited %v on a dead Redis", took)
		}
		if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Degraded") != "1" {
			t.Fatalf("read during outage: %d degraded=%q", resp.StatusCode, resp.Header.Get("X-RateLimit-Degraded"))
		}
		resp, body := post(t, base+"/v1/check", login)
		if resp.StatusCode != 503 || !strings.Contains(body, `"code":"LIMITER_UNAVAILABLE"`) || resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("login during outage: %d %s", resp.StatusCode, body)
		}
	}
	_, metrics := get(t, base+"/metrics")
	if !strings.Contains(metrics, "tollgate_store_circuit_state 1") && !strings.Contains(metrics, "tollgate_store_circuit_state 2") {
		t.Fatalf("circuit not open after 40 failures")
	}
	if code, body := get(t, base+"/readyz"); code != 200 || !strings.Contains(body, `"redis":"down"`) {
		t.Fatalf("readyz during outage: %d %s", code, body)
	}
	srv.Restart(t)
	back := time.Now()
	eventually(t, 5*time.Second, func() string {
		resp, _ := post(t, base+"/v1/check", login)
		if resp.StatusCode != 200 {
			return "login still " + resp.Status
		}
		return ""
	})
	if d := time.Since(back); d > 2*time.Second {
		t.Errorf("decisions normal %v after Redis returned, want < 2s", d)
	}
}

func TestPolicyHotReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	write := func(rate string) {
		if err := os.WriteFile(path, []byte("version: 1\nlimits:\n  - {name: per-ip, by: [ip], rate: "+rate+"}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("10/min")
	_, base := start(t, Config{ConfigPath: path, WatchInterval: 20 * time.Millisecond})
	limit := func() string {
		resp, _ := post(t, base+"/v1/check", `{"endpoint":"GET /","ip":"192.0.2.1"}`)
		return resp.Header.Get("X-RateLimit-Limit")
	}
	if l := limit(); l != "10" {
		t.Fatalf("limit %s", l)
	}
	write("20/min")
	eventually(t, 5*time.Second, func() string {
		if l := limit(); l != "20" {
			return "limit still " + l
		}
		return ""
	})
	if err := os.WriteFile(path, []byte("version: 1\nlimits:\n  - {name: per-ip, by: [ip], rate: lots}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() string {
		_, m := get(t, base+"/metrics")
		if !strings.Contains(m, `tollgate_policy_reloads_total{result="error"} 1`) {
			return "refusal not counted"
		}
		return ""
	})
	if l := limit(); l != "20" {
		t.Fatalf("an invalid file replaced the policy: limit %s", l)
	}
}

func TestRedisOptions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in      string
		addrs   string
		cluster bool
		db      int
		wantErr string
	}{
		{in: "redis://127.0.0.1:6379/3", addrs: "127.0.0.1:6379", db: 3},
		{in: "127.0.0.1:6379", addrs: "127.0.0.1:6379"},
		{in: "a:1,b:2", addrs: "a:1,b:2", cluster: true},
		{in: "redis+cluster://a:1,b:2", addrs: "a:1,b:2", cluster: true},
		{in: "redis://:pw@127.0.0.1:6379/x", wantErr: "service: redis url redis://***@127.0.0.1:6379/x: redis: invalid database number: \"x\""},
		{in: "nonsense", wantErr: `service: redis "nonsense" is neither redis://host:port/db nor host:port`},
		{in: "a:1,b", wantErr: `service: redis address "b": address b: missing port in address`},
	} {
		o, err := RedisOptions(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("%s: err = %v, want %s", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || strings.Join(o.Addrs, ",") != tt.addrs || o.IsClusterMode != tt.cluster || o.DB != tt.db {
			t.Errorf("%s: %+v %v", tt.in, o, err)
		}
	}
}

// TestRedisCluster runs the limiter on a 3-node Redis Cluster: the
// login's limits live in several slots and still give one decision.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	cl := testenv.StartCluster(t)
	_, base := start(t, Config{RedisURL: "redis+cluster://" + strings.Join(cl.Addrs, ","), StoreTimeout: slowOK})
	login := `{"endpoint":"POST /auth/login","ip":"198.51.100.7","account":"alice"}`
	for i := 4; i >= 0; i-- {
		resp, body := post(t, base+"/v1/check", login)
		if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != itoa(i) {
			t.Fatalf("request %d: %d %s", 5-i, resp.StatusCode, body)
		}
	}
	if resp, body := post(t, base+"/v1/check", login); resp.StatusCode != 429 || !strings.Contains(body, `"limit":"login-account"`) {
		t.Fatalf("6th: %d %s", resp.StatusCode, body)
	}
	// the login-ip bucket (another slot) gave back what the denied 6th took
	if resp, _ := post(t, base+"/v1/check", `{"endpoint":"POST /auth/login","ip":"198.51.100.7","account":"bob","cost":0}`); resp.Header.Get("RateLimit-Policy") != `"login-ip";q=10;w=60` || resp.Header.Get("X-RateLimit-Remaining") != "5" {
		t.Fatalf("login-ip after the denial: %v", resp.Header)
	}
}

func itoa(i int) string { return string(rune('0' + i)) }

// newUpstream starts an HTTP upstream and returns its URL.
func newUpstream(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}

func TestProxyMode(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("upstream " + r.URL.Path)) })
	_, base := start(t, Config{Upstream: up})
	code, body := get(t, base+"/hello")
	if code != 200 || body != "upstream /hello" {
		t.Fatalf("%d %s", code, body)
	}
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Fatalf("readyz proxied? %d", code)
	}
}

// TestProxyModeTwoListeners (6.1): the public listener forwards the
// limiter's API paths to the upstream; the API listener serves them, and
// /metrics, and forwards nothing.
func TestProxyModeTwoListeners(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("upstream " + r.URL.Path)) })
	r, base := start(t, Config{Upstream: up, APIToken: "t0k"})
	if r.APIAddr == r.Addr || r.APIAddr == "" {
		t.Fatalf("API listener %q, public %q", r.APIAddr, r.Addr)
	}
	api := "http://" + r.APIAddr
	if resp, body := post(t, base+"/v1/check", `{"endpoint":"GET /x","ip":"192.0.2.1"}`); resp.StatusCode != 200 || body != "upstream /v1/check" {
		t.Fatalf("public /v1/check: %d %s", resp.StatusCode, body)
	}
	if code, body := get(t, base+"/metrics"); code != 200 || body != "upstream /metrics" {
		t.Fatalf("public /metrics: %d %.80s", code, body)
	}
	if resp, body := post(t, api+"/v1/check", `{"endpoint":"GET /x","ip":"192.0.2.1"}`); resp.StatusCode != 401 || !strings.Contains(body, "UNAUTHORIZED") {
		t.Fatalf("API /v1/check without the token: %d %s", resp.StatusCode, body)
	}
	req, _ := http.NewRequest("POST", api+"/v1/check", strings.NewReader(`{"endpoint":"GET /x","ip":"192.0.2.1"}`))
	req.Header.Set("Authorization", "Bearer t0k")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") == "" {
		t.Fatalf("API /v1/check: %d", resp.StatusCode)
	}
	if code, body := get(t, api+"/metrics"); code != 200 || !strings.Contains(body, "tollgate_decisions_total") {
		t.Fatalf("API /metrics: %d", code)
	}
	if code, body := get(t, api+"/hello"); code != 404 || strings.Contains(body, "upstream") {
		t.Fatalf("API /hello: %d %s; want 404, never forwarded", code, body)
	}
	for _, a := range []string{base, api} {
		if code, _ := get(t, a+"/readyz"); code != 200 {
			t.Fatalf("%s/readyz: %d", a, code)
		}
	}
	if err := (&Config{Upstream: up, Listen: "127.0.0.1:9000", APIListen: "127.0.0.1:9000"}).Validate(); err == nil {
		t.Fatal("one address for both listeners was accepted")
	}
}
