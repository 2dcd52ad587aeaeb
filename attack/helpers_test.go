package attack

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/service"
)

// Secrets of the attacked deployment. The attacker knows none of them.
const (
	adminToken = "admin-secret"
	apiToken   = "api-secret"
	userKeyEnv = "TOLLGATE_ATTACK_USER_KEY"
	userKey    = "user-signing-key"
)

func TestMain(m *testing.M) {
	os.Setenv(userKeyEnv, userKey)
	os.Exit(m.Run())
}

// attackPolicy is the contract's example policy, behind a load balancer
// on loopback (so X-Forwarded-For names the attacker's address).
const attackPolicy = `version: 1
identity:
  trusted_proxies: [127.0.0.0/8]
  user_header: X-User-Id
  user_signature_header: X-User-Signature
  user_signature_key_env: ` + userKeyEnv + `
  device_header: X-Device-Id
  account_body_field: username
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "POST /token",      class: auth}
  - {match: "GET /search*",     class: expensive}
  - {match: "GET *",            class: read}
  - {match: "* *",              class: write}
limits:
  - {name: global,        by: [global],          rate: 100000/s}
  - {name: ip-unauth,     by: [ip],              rate: 60/min,  if: {authenticated: false}}
  - {name: ip-auth,       by: [ip],              rate: 600/min, if: {authenticated: true}}
  - {name: user-write,    by: [user],            rate: 60/min,  if: {class: write}}
  - {name: user-read,     by: [user],            rate: 300/min, if: {class: [read, expensive]}}
  - {name: device,        by: [device],          rate: 600/min}
  - {name: login-ip,      by: [ip, route],       rate: 10/min,  if: {class: auth}}
  - {name: login-account, by: [account, route],  rate: 5/min,   if: {class: auth}}
failure_mode: {default: open, auth: closed}
risk:
  velocity:
    - {name: account-failures, event: login_failed, by: account, threshold: 10, window: 10m,
       action: lockout, duration: 15m, exempt_attested: true}
  attestation:
    verified_multiplier: 2.0
    valid_for: 24h
`

// upstream is the API behind the proxy: it reads logins the way a Go
// service does (encoding/json into a struct, or r.FormValue for form
// bodies, url-encoded or multipart, which also reads the query string, as
// Rails' params, Laravel's input() and Spring's @RequestParam do) and routes leniently, like most frameworks (a trailing slash,
// repeated slashes and dot segments do not matter). It records what it saw.
type upstream struct {
	srv *httptest.Server

	mu       sync.Mutex
	attempts map[string]int // login attempts that reached it, by account
	paths    []string       // every request's METHOD and path, as received
	users    [][]string     // every request's X-User-Id values
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{attempts: map[string]int{}}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.paths = append(u.paths, r.Method+" "+r.URL.Path)
	u.users = append(u.users, r.Header.Values("X-User-Id"))
	u.mu.Unlock()
	if r.Method == http.MethodPost && strings.TrimSuffix(path.Clean(r.URL.Path), "/") == "/auth/login" {
		var login struct {
			Username string `json:"username"`
			Password string `json:"password"`
		}
		if ct := r.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/x-www-form-urlencoded") || strings.HasPrefix(ct, "multipart/form-data") {
			login.Username, login.Password = r.FormValue("username"), r.FormValue("password")
		} else if err := json.NewDecoder(r.Body).Decode(&login); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		u.mu.Lock()
		u.attempts[login.Username]++
		u.mu.Unlock()
		if login.Password != "right" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, `{"token":"t"}`)
		return
	}
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("X-Upstream", "yes")
	_, _ = io.WriteString(w, `{"upstream":true}`)
}

// reached reports how many requests with this METHOD and path reached the upstream.
func (u *upstream) reached(methodPath string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, p := range u.paths {
		if p == methodPath {
			n++
		}
	}
	return n
}

// seen returns every request's METHOD and path as the upstream received them.
func (u *upstream) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.paths)
}

func (u *upstream) attemptsOn(account string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.attempts[account]
}

// target is a limiter in proxy mode in front of an upstream, with riskd.
type target struct {
	public string // the port the internet reaches
	api    string // the limiter's own API
	grpc   string // the Envoy rate-limit service's address (with --grpc-listen)
	riskd  string // riskd's /healthz, /readyz and /metrics
	up     *upstream
	rdb    *redis.Client
	prefix string
	stream string
	// riskdConf is riskd's configuration, stopRiskd stops the riskd
	// running (restartRiskd)
	riskdConf service.RiskdConfig
	stopRiskd func()
}

// setup changes the limiter's configuration before it starts.
type setup func(*service.Config)

// start runs the limiter (shared Redis and NATS, a key prefix and streams
// of its own) and riskd in front of a new upstream.
func start(t *testing.T, setups ...setup) *target {
	t.Helper()
	return startWith(t, nil, setups...)
}

// startWith is start with riskdSetup changing riskd's configuration too
// (nil: none).
func startWith(t *testing.T, riskdSetup func(*service.RiskdConfig), setups ...setup) *target {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	stream, subj := testenv.SharedStreams(t)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte(attackPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t)
	redisURL := "redis://" + testenv.RedisAddr() + "/0"
	cfg := service.Config{
		ConfigPath: pol, Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Upstream: up.srv.URL,
		RedisURL: redisURL, NATSURL: testenv.NATSURL(), KeyPrefix: prefix, SubjectPrefix: subj, StreamName: stream,
		DecisionsMaxBytes: 16 << 20, EventsMaxBytes: 16 << 20,
		// generous: a loaded test machine must not turn a decision into a
		// degraded (fail-open) one; the deadline test sets its own
		StoreTimeout: 2 * time.Second,
		AdminToken:   adminToken, APIToken: apiToken, Logger: slog.New(slog.DiscardHandler),
	}
	for _, s := range setups {
		s(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r, err := service.Start(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	rc := service.RiskdConfig{ConfigPath: pol, Listen: "127.0.0.1:0", RedisURL: cfg.RedisURL,
		NATSURL: testenv.NATSURL(), KeyPrefix: prefix, SubjectPrefix: subj, StreamName: stream,
		DecisionsMaxBytes: cfg.DecisionsMaxBytes, EventsMaxBytes: cfg.EventsMaxBytes, LeaseTTL: time.Second,
		Logger: slog.New(slog.DiscardHandler)}
	if riskdSetup != nil {
		riskdSetup(&rc)
	}
	rr, err := service.StartRiskd(rctx, rc)
	if err != nil {
		cancel()
		<-r.Done
		rcancel()
		t.Fatal(err)
	}
	tg := &target{public: "http://" + r.Addr, api: "http://" + r.APIAddr, grpc: r.GRPCAddr, riskd: "http://" + rr.Addr, up: up, rdb: rdb, prefix: prefix, stream: stream,
		riskdConf: rc, stopRiskd: func() { rcancel(); <-rr.Done }}
	t.Cleanup(func() {
		tg.stopRiskd()
		cancel()
		<-r.Done
	})
	tg.riskdReady(t)
	return tg
}

// riskdReady waits until riskd answers /readyz 200.
func (tg *target) riskdReady(t *testing.T) {
	t.Helper()
	eventually(t, 30*time.Second, func() string {
		if code, body := do(t, "GET", tg.riskd+"/readyz", "", nil); code != 200 {
			return "riskd not ready: " + body
		}
		return ""
	})
}

// restartRiskd stops riskd, calls meanwhile, and starts a new riskd
// process's worth of state (its own trust record) with the same
// configuration, waiting until it is ready.
func (tg *target) restartRiskd(t *testing.T, meanwhile func()) {
	t.Helper()
	tg.stopRiskd()
	tg.stopRiskd = func() {}
	meanwhile()
	ctx, cancel := context.WithCancel(context.Background())
	rr, err := service.StartRiskd(ctx, tg.riskdConf)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	tg.riskd, tg.stopRiskd = "http://"+rr.Addr, func() { cancel(); <-rr.Done }
	tg.riskdReady(t)
}

// sharedJetStream is a JetStream client of the shared NATS server (the
// suite's streams are tg.stream's), closed when the test ends.
func sharedJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(testenv.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// client is the tests' HTTP client (not http.DefaultClient, whose idle
// connections a parallel httptest.Server.Close closes).
var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}

// do sends a request and returns the status and body.
func do(t testing.TB, method, url, body string, h http.Header) (int, string) {
	t.Helper()
	code, _, b := doH(t, method, url, body, h)
	return code, b
}

// doH is do that also returns the response header.
func doH(t testing.TB, method, url, body string, h http.Header) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	if req.Header.Get("Content-Type") == "" && body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header, string(b)
}

// from is the header of a request the load balancer relays for ip.
func from(ip string, kv ...string) http.Header {
	h := http.Header{"X-Forwarded-For": {ip}}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// bearer is the header of a call with a token.
func bearer(token string) http.Header { return http.Header{"Authorization": {"Bearer " + token}} }

// sign is the user header's signature the API backend would add.
func sign(user string) string {
	m := hmac.New(sha256.New, []byte(userKey))
	m.Write([]byte(user))
	return hex.EncodeToString(m.Sum(nil))
}

// syncRisk waits until riskd has acted on every report published so far:
// it locks a fresh control account through the API port and waits for the
// lockout (riskd reads the reports stream in order).
func (tg *target) syncRisk(t *testing.T) {
	t.Helper()
	control := fmt.Sprintf("control-%d", time.Now().UnixNano())
	for i := 0; i < 10; i++ {
		if code, body := do(t, "POST", tg.api+"/v1/report", `{"type":"login_failed","account":"`+control+`"}`, bearer(apiToken)); code != 202 {
			t.Fatalf("control report: %d %s", code, body)
		}
	}
	eventually(t, 10*time.Second, func() string {
		_, body := do(t, "POST", tg.api+"/v1/check", `{"endpoint":"POST /auth/login","ip":"192.0.2.200","account":"`+control+`"}`, bearer(apiToken))
		if !strings.Contains(body, "ACCOUNT_LOCKED") {
			return "control account not locked yet: " + body
		}
		return ""
	})
}

// eventually polls f until it returns "" or d passes.
func eventually(t testing.TB, d time.Duration, f func() string) {
	t.Helper()
	testenv.Eventually(t, d, f)
}

// code returns the envelope's error code ("" when the body is none).
func code(body string) string {
	var env struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(body), &env)
	return env.Error.Code
}
