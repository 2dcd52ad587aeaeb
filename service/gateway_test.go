package service

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// gatewayPolicy is docs/gateways.md's forward-auth policy: the gateway
// (on loopback here) is a trusted proxy.
const gatewayPolicy = `version: 1
identity:
  trusted_proxies: [127.0.0.1]
  user_header: X-User-Id
  device_header: X-Device-Id
  account_header: X-Account
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "GET *", class: read}
limits:
  - {name: ip-unauth, by: [ip], rate: 2/min, if: {authenticated: false}}
  - {name: user-read, by: [user], rate: 3/min, if: {class: read}}
  - {name: login-account, by: [account, route], rate: 1/min, if: {class: auth}}
failure_mode: {default: open, auth: closed}
`

// upstreamLog is an upstream API that records the paths it served and
// the Authorization header each request had.
type upstreamLog struct {
	mu    sync.Mutex
	paths []string
	auths []string
}

func (u *upstreamLog) start(t *testing.T) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.paths = append(u.paths, r.Method+" "+r.URL.RequestURI())
		u.auths = append(u.auths, r.Header.Get("Authorization"))
		u.mu.Unlock()
		_, _ = io.WriteString(w, "hello from upstream")
	}))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

// authorizations returns the Authorization headers the upstream got, in order.
func (u *upstreamLog) authorizations() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return strings.Join(u.auths, ",")
}

func (u *upstreamLog) seen() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return strings.Join(u.paths, ",")
}

type gwResponse struct {
	status int
	h      http.Header
	body   string
}

func gwDo(t *testing.T, addr, method, path string, hdr ...string) gwResponse {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+addr+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return gwResponse{resp.StatusCode, resp.Header, string(b)}
}

// wantGW checks a gateway answer: status, body prefix and headers.
func wantGW(t *testing.T, g *testenv.Gateway, r gwResponse, status int, body string, kv ...string) {
	t.Helper()
	if r.status != status || !strings.HasPrefix(r.body, body) {
		t.Fatalf("status %d body %q, want %d %q\nheaders %v\ngateway output:\n%s", r.status, r.body, status, body, r.h, g.Output())
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if got := r.h.Get(kv[i]); got != kv[i+1] {
			t.Errorf("header %s = %q, want %q", kv[i], got, kv[i+1])
		}
	}
}

// gatewayScenario is what every forward-auth gateway must get right, in
// front of a running limiter: allowed requests reach the upstream with
// the rate-limit headers on the answer; the 4th read of a user is the
// app's 429 (envelope, Retry-After), never forwarded; clients behind the
// gateway are told apart by X-Forwarded-For; the login account limit
// applies through the account header.
func gatewayScenario(t *testing.T, g *testenv.Gateway, up *upstreamLog) {
	t.Helper()
	feed := []string{"X-User-Id", "u_1", "X-Forwarded-For", "198.51.100.7"}
	for i := 2; i >= 0; i-- {
		wantGW(t, g, gwDo(t, g.Addr, "GET", "/feed?page=1", feed...), 200, "hello from upstream",
			"X-RateLimit-Limit", "3", "X-RateLimit-Remaining", fmt.Sprint(i), "RateLimit-Policy", `"user-read";q=3;w=60`)
	}
	r := gwDo(t, g.Addr, "GET", "/feed?page=2", feed...)
	wantGW(t, g, r, 429, `{"error":{"code":"RATE_LIMITED","message":"Too many requests","details":{"retry_after_ms":`,
		"X-RateLimit-Limit", "3", "X-RateLimit-Remaining", "0", "Content-Type", "application/json")
	if ra := r.h.Get("Retry-After"); ra == "" || ra == "0" {
		t.Fatalf("429 without Retry-After: %v", r.h)
	}
	if want := "GET /feed?page=1,GET /feed?page=1,GET /feed?page=1"; up.seen() != want {
		t.Fatalf("upstream saw %s, want %s", up.seen(), want)
	}
	// unauthenticated clients: 2/min each, by the address the gateway saw
	anon := func(ip string) gwResponse { return gwDo(t, g.Addr, "GET", "/about", "X-Forwarded-For", ip) }
	wantGW(t, g, anon("203.0.113.1"), 200, "hello")
	wantGW(t, g, anon("203.0.113.1"), 200, "hello")
	wantGW(t, g, anon("203.0.113.1"), 429, `{"error":{"code":"RATE_LIMITED"`)
	wantGW(t, g, anon("203.0.113.2"), 200, "hello", "X-RateLimit-Remaining", "1")
	// login: one per account and minute, from the account header
	wantGW(t, g, gwDo(t, g.Addr, "POST", "/auth/login", "X-Account", "alice", "X-Forwarded-For", "203.0.113.9"), 200, "hello")
	wantGW(t, g, gwDo(t, g.Addr, "POST", "/auth/login", "X-Account", "alice", "X-Forwarded-For", "203.0.113.10"), 429,
		`{"error":{"code":"RATE_LIMITED","message":"Too many requests","details":{"retry_after_ms":`)
}

func startGatewayLimiter(t *testing.T) (string, *upstreamLog, string) {
	t.Helper()
	r, _ := start(t, Config{ConfigPath: writePolicy(t, gatewayPolicy)})
	up := &upstreamLog{}
	return r.Addr, up, up.start(t)
}

// TestCaddyForwardAuth runs a real Caddy (`forward_auth`, as in
// docs/gateways.md) in front of an upstream, with a running limiter.
func TestCaddyForwardAuth(t *testing.T) {
	t.Parallel()
	limiter, up, upstream := startGatewayLimiter(t)
	g := testenv.StartCaddy(t, func(port int) string { return caddyfile(port, limiter, upstream) })
	gatewayScenario(t, g, up)
}

// caddyfile is docs/gateways.md's Caddy configuration.
func caddyfile(port int, limiter, upstream string) string {
	return fmt.Sprintf(`{
	admin off
	auto_https off
}

http://127.0.0.1:%d {
	bind 127.0.0.1
	forward_auth %s {
		uri /v1/forward-auth
		trusted_proxies 127.0.0.1/32
		copy_headers X-RateLimit-Limit X-RateLimit-Remaining X-RateLimit-Reset RateLimit-Policy RateLimit X-RateLimit-Degraded
	}
	header {
		?X-RateLimit-Limit {http.request.header.X-RateLimit-Limit}
		?X-RateLimit-Remaining {http.request.header.X-RateLimit-Remaining}
		?X-RateLimit-Reset {http.request.header.X-RateLimit-Reset}
		?RateLimit-Policy {http.request.header.RateLimit-Policy}
		?RateLimit {http.request.header.RateLimit}
	}
	reverse_proxy %s
}
`, port, limiter, upstream)
}

// TestNGINXAuthRequest runs a real NGINX (`auth_request` with the
// ?status=403 form and an error_page that turns it back into the app's
// 429, as in docs/gateways.md) in front of an upstream.
func TestNGINXAuthRequest(t *testing.T) {
	t.Parallel()
	limiter, up, upstream := startGatewayLimiter(t)
	g := testenv.StartNGINX(t, func(port int, dir string) string { return nginxConf(port, dir, limiter, upstream) })
	gatewayScenario(t, g, up)
}

// nginxConf is docs/gateways.md's NGINX server block inside a minimal
// nginx.conf that keeps everything in dir.
func nginxConf(port int, dir, limiter, upstream string) string {
	return fmt.Sprintf(`daemon off;
master_process on;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 128; }
http {
	access_log off;
	client_body_temp_path %[1]s/client_body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;

	upstream tollgate { server %[3]s; keepalive 16; }
	upstream api { server %[4]s; keepalive 16; }

	server {
		listen 127.0.0.1:%[2]d;
%[5]s
		location / {
			auth_request /_tollgate;
			auth_request_set $tg_status $upstream_http_x_tollgate_status;
			auth_request_set $tg_envelope $upstream_http_x_tollgate_envelope;
			auth_request_set $tg_retry_after $upstream_http_retry_after;
			auth_request_set $tg_limit $upstream_http_x_ratelimit_limit;
			auth_request_set $tg_remaining $upstream_http_x_ratelimit_remaining;
			auth_request_set $tg_reset $upstream_http_x_ratelimit_reset;
			auth_request_set $tg_policy $upstream_http_ratelimit_policy;
			auth_request_set $tg_ratelimit $upstream_http_ratelimit;
			auth_request_set $tg_degraded $upstream_http_x_ratelimit_degraded;
			add_header X-RateLimit-Limit $tg_limit always;
			add_header X-RateLimit-Remaining $tg_remaining always;
			add_header X-RateLimit-Reset $tg_reset always;
			add_header RateLimit-Policy $tg_policy always;
			add_header RateLimit $tg_ratelimit always;
			add_header X-RateLimit-Degraded $tg_degraded always;
			error_page 403 = @tollgate_denied;

			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
			proxy_pass http://api;
		}
	}
}
`, dir, port, limiter, upstream, nginxTollgateLocations)
}

// nginxTollgateLocations are the two locations docs/gateways.md adds to
// a server block: the auth subrequest and the denial.
const nginxTollgateLocations = `
		location = /_tollgate {
			internal;
			proxy_pass http://tollgate/v1/forward-auth?status=403;
			proxy_method GET;
			proxy_pass_request_body off;
			proxy_set_header Content-Length "";
			proxy_set_header X-Forwarded-Method $request_method;
			proxy_set_header X-Forwarded-Uri $request_uri;
			proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
		}

		location @tollgate_denied {
			default_type application/json;
			add_header Retry-After $tg_retry_after always;
			add_header X-RateLimit-Limit $tg_limit always;
			add_header X-RateLimit-Remaining $tg_remaining always;
			add_header X-RateLimit-Reset $tg_reset always;
			add_header RateLimit-Policy $tg_policy always;
			add_header RateLimit $tg_ratelimit always;
			if ($tg_status = 400) { return 400 $tg_envelope; }
			if ($tg_status = 429) { return 429 $tg_envelope; }
			if ($tg_status = 503) { return 503 $tg_envelope; }
			return 403 $tg_envelope;
		}
`
