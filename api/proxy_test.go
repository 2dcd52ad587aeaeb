package api

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

const proxyPolicy = `version: 1
identity:
  trusted_proxies: [10.0.0.0/8, 127.0.0.2]
  user_header: X-User-Id
  user_signature_header: X-User-Signature
  user_signature_key_env: TEST_USER_KEY
  device_header: X-Device-Id
  account_body_field: username
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "* *", class: read}
limits:
  - {name: ip-unauth, by: [ip], rate: 3/min, if: {authenticated: false}}
  - {name: user, by: [user], rate: 100/min}
  - {name: login-account, by: [account, route], rate: 100/min, if: {class: auth}}
`

type fakeReporter struct {
	mu   sync.Mutex
	list []streams.Report
}

func (f *fakeReporter) Report(_ context.Context, r *streams.Report) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.list = append(f.list, *r)
	return nil
}

type proxyFixture struct {
	front    *httptest.Server
	srv      *Server
	seen     chan *http.Request
	bodies   chan string
	reporter *fakeReporter
	events   *sink
	forged   atomic.Int64
	upErrs   atomic.Int64       // OnUpstreamError calls
	log      testenv.SyncBuffer // the server's log, debug level
}

func newProxyFixture(t *testing.T, upstream http.Handler) *proxyFixture {
	t.Helper()
	return newProxyFixtureWith(t, upstream, proxyPolicy)
}

// newProxyFixtureWith is newProxyFixture under the policy text.
func newProxyFixtureWith(t *testing.T, upstream http.Handler, text string) *proxyFixture {
	t.Helper()
	f := &proxyFixture{seen: make(chan *http.Request, 100), bodies: make(chan string, 100), reporter: &fakeReporter{}, events: &sink{}}
	if upstream == nil {
		upstream = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			f.seen <- r
			f.bodies <- string(b)
			if r.URL.Path == "/auth/login" && strings.Contains(string(b), "wrong") {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			w.Header().Set("X-Upstream", "yes")
			_, _ = io.WriteString(w, "hello from upstream "+r.URL.Path)
		})
	}
	up := httptest.NewServer(upstream)
	t.Cleanup(up.Close)
	p, err := policy.Parse("proxy.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	eng, _ := engine.New(engine.Options{Store: bucket.NewMemoryStore(bucket.MemoryOptions{}), Policy: func() *policy.Policy { return p },
		Metrics: engine.NewMetrics(prometheus.NewRegistry())})
	f.srv, _ = New(Options{Engine: eng, Reporter: f.reporter, Events: f.events,
		Logger: slog.New(slog.NewTextHandler(&f.log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	u, _ := url.Parse(up.URL)
	if err := f.srv.EnableProxy(ProxyOptions{Upstream: u, Getenv: func(string) string { return "k3y" }, OnForgedUser: func() { f.forged.Add(1) },
		OnUpstreamError: func() { f.upErrs.Add(1) }}); err != nil {
		t.Fatal(err)
	}
	f.front = httptest.NewServer(f.srv.Public())
	t.Cleanup(f.front.Close)
	return f
}

func (f *proxyFixture) do(t *testing.T, method, path, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, f.front.URL+path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := f.front.Client().Do(req) // not http.DefaultClient: parallel tests closing httptest servers close its idle conns
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func sign(user string) string {
	m := hmac.New(sha256.New, []byte("k3y"))
	m.Write([]byte(user))
	return hex.EncodeToString(m.Sum(nil))
}

func TestProxyForwardsAndLimits(t *testing.T) {
	t.Parallel()
	f := newProxyFixture(t, nil)
	for i := 2; i >= 0; i-- {
		resp, body := f.do(t, "GET", "/feed?x=1", "")
		if resp.StatusCode != 200 || body != "hello from upstream /feed" || resp.Header.Get("X-Upstream") != "yes" ||
			resp.Header.Get("X-RateLimit-Remaining") != itoa(int64(i)) || resp.Header.Get("X-RateLimit-Limit") != "3" {
			t.Fatalf("forwarded: %d %q %v", resp.StatusCode, body, resp.Header)
		}
		r := <-f.seen
		<-f.bodies
		if r.Header.Get("X-Forwarded-For") != "127.0.0.1" || r.URL.RawQuery != "x=1" || r.Header.Get("X-Request-Id") == "" {
			t.Fatalf("upstream saw XFF %q query %q", r.Header.Get("X-Forwarded-For"), r.URL.RawQuery)
		}
	}
	resp, body := f.do(t, "GET", "/feed", "")
	if resp.StatusCode != 429 || !strings.HasPrefix(body, `{"error":{"code":"RATE_LIMITED"`) || resp.Header.Get("Retry-After") != "20" {
		t.Fatalf("denied: %d %s", resp.StatusCode, body)
	}
	select {
	case <-f.seen:
		t.Fatal("a denied request reached the upstream")
	default:
	}
	// health is the limiter's own (never checked nor proxied); /v1/ paths
	// are the upstream's, checked like any other (this one over the limit)
	if resp, _ := f.do(t, "GET", "/healthz", ""); resp.StatusCode != 200 {
		t.Fatalf("healthz: %d", resp.StatusCode)
	}
	if resp, _ := f.do(t, "GET", "/v1/nothing", ""); resp.StatusCode != 429 {
		t.Fatalf("/v1/nothing: %d", resp.StatusCode)
	}
}

// TestProxySpoofedForwardedFor: X-Forwarded-For from an untrusted peer
// (the loopback test client) does not change the key.
func TestProxySpoofedForwardedFor(t *testing.T) {
	t.Parallel()
	f := newProxyFixture(t, nil)
	for i := 0; i < 3; i++ {
		f.do(t, "GET", "/x", "", "X-Forwarded-For", "203.0.113."+itoa(int64(i)))
		<-f.seen
		<-f.bodies
	}
	if resp, _ := f.do(t, "GET", "/x", "", "X-Forwarded-For", "203.0.113.99"); resp.StatusCode != 429 {
		t.Fatalf("rotating a spoofed XFF escaped the limit: %d", resp.StatusCode)
	}
}

func TestClientIP(t *testing.T) {
	t.Parallel()
	trusted := []netipPrefix{"10.0.0.0/8", "127.0.0.2/32"}
	for _, tt := range []struct {
		peer, xff, want, chain string
	}{
		{"198.51.100.7:1", "", "198.51.100.7", ""},
		{"198.51.100.7:1", "1.2.3.4", "198.51.100.7", ""},           // untrusted peer: XFF ignored
		{"10.1.1.1:1", "203.0.113.5", "203.0.113.5", "203.0.113.5"}, // trusted peer
		// the chain forwarded: the client's entry and the trusted hops
		// after it, never what the client wrote left of its own entry
		{"10.1.1.1:1", "1.1.1.1, 203.0.113.5, 10.2.2.2", "203.0.113.5", "203.0.113.5, 10.2.2.2"},
		{"127.0.0.2:1", "6.6.6.6, 198.51.100.7, 10.0.0.5", "198.51.100.7", "198.51.100.7, 10.0.0.5"},
		{"10.1.1.1:1", "6.6.6.6, 198.51.100.7:4711, 10.0.0.5", "198.51.100.7", "198.51.100.7, 10.0.0.5"},
		{"10.1.1.1:1", "10.3.3.3, 10.2.2.2", "10.3.3.3", "10.3.3.3, 10.2.2.2"}, // all trusted: the left-most
		{"10.1.1.1:1", "garbage, 10.3.3.3, 10.2.2.2", "10.3.3.3", "10.3.3.3, 10.2.2.2"},
		{"10.1.1.1:1", "garbage, 203.0.113.5", "203.0.113.5", "203.0.113.5"},
		{"10.1.1.1:1", "203.0.113.5, garbage", "10.1.1.1", ""}, // the peer is the client
		{"10.1.1.1:1", "", "10.1.1.1", ""},
		{"[::ffff:10.1.1.1]:1", "203.0.113.5", "203.0.113.5", "203.0.113.5"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tt.peer
		if tt.xff != "" {
			r.Header.Set("X-Forwarded-For", tt.xff)
		}
		ip, chain := clientIP(r, prefixes(trusted))
		if ip.String() != tt.want || chain != tt.chain {
			t.Errorf("peer %s xff %q: got %s %q, want %s %q", tt.peer, tt.xff, ip, chain, tt.want, tt.chain)
		}
	}
}

func TestProxyUserSignature(t *testing.T) {
	t.Parallel()
	f := newProxyFixture(t, nil)
	// a valid signature: authenticated, the user header is forwarded
	resp, _ := f.do(t, "GET", "/me", "", "X-User-Id", "u_42", "X-User-Signature", sign("u_42"))
	r := <-f.seen
	<-f.bodies
	if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != `"user";q=100;w=60` || r.Header.Get("X-User-Id") != "u_42" {
		t.Fatalf("signed user: %d %q upstream user %q", resp.StatusCode, resp.Header.Get("RateLimit-Policy"), r.Header.Get("X-User-Id"))
	}
	// a forged header: removed, unauthenticated, counted
	resp, _ = f.do(t, "GET", "/me", "", "X-User-Id", "admin", "X-User-Signature", sign("u_42"))
	r = <-f.seen
	<-f.bodies
	if resp.Header.Get("RateLimit-Policy") != `"ip-unauth";q=3;w=60` || r.Header.Get("X-User-Id") != "" || f.forged.Load() != 1 {
		t.Fatalf("forged user: policy %q upstream user %q forged %d", resp.Header.Get("RateLimit-Policy"), r.Header.Get("X-User-Id"), f.forged.Load())
	}
}

func TestProxyLoginOutcomes(t *testing.T) {
	t.Parallel()
	f := newProxyFixture(t, nil)
	body := `{"username":"alice","password":"wrong"}`
	resp, _ := f.do(t, "POST", "/auth/login", body, "X-Device-Id", "d_1")
	if got := <-f.bodies; got != body || resp.StatusCode != 401 {
		t.Fatalf("upstream got %q, status %d", got, resp.StatusCode)
	}
	<-f.seen
	if resp.Header.Get("RateLimit-Policy") != `"ip-unauth";q=3;w=60` && resp.Header.Get("X-RateLimit-Limit") == "" {
		t.Fatalf("no rate-limit headers on the upstream's answer: %v", resp.Header)
	}
	f.do(t, "POST", "/auth/login", `{"username":"alice","password":"right"}`)
	<-f.seen
	<-f.bodies
	f.srv.WaitReports()
	f.reporter.mu.Lock()
	defer f.reporter.mu.Unlock()
	if len(f.reporter.list) != 2 || f.reporter.list[0].Type != "login_failed" || f.reporter.list[0].Account != "alice" ||
		f.reporter.list[0].DeviceID != "d_1" || f.reporter.list[0].Source != "proxy" || f.reporter.list[1].Type != "login_succeeded" {
		t.Fatalf("reports %+v", f.reporter.list)
	}
}

// TestProxyReportAfterWait: a login that ends after WaitReports began (a
// request cut at a drain's timeout, its handler still running) is
// answered, and its report is not published: no Add races the Wait.
func TestProxyReportAfterWait(t *testing.T) {
	t.Parallel()
	f := newProxyFixture(t, nil)
	f.srv.WaitReports()
	resp, _ := f.do(t, "POST", "/auth/login", `{"username":"alice","password":"wrong"}`)
	<-f.seen
	<-f.bodies
	f.srv.WaitReports()
	f.reporter.mu.Lock()
	defer f.reporter.mu.Unlock()
	if resp.StatusCode != 401 || len(f.reporter.list) != 0 || !strings.Contains(f.log.String(), "report after shutdown's wait") {
		t.Fatalf("status %d, reports %+v, log %s", resp.StatusCode, f.reporter.list, f.log.String())
	}
}

func TestProxyUpstreamDown(t *testing.T) {
	t.Parallel()
	f := newProxyFixture(t, nil)
	dead := testenv.RefusedAddr(t)
	u, _ := url.Parse("http://" + dead)
	_ = f.srv.EnableProxy(ProxyOptions{Upstream: u})
	resp, body := f.do(t, "GET", "/x", "")
	if resp.StatusCode != 502 || !strings.HasPrefix(body, `{"error":{"code":"UPSTREAM_UNAVAILABLE","message":"upstream unavailable"`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

// TestProxyStreamsBodies: a large request body is streamed through, and a
// response is flushed to the client as the upstream writes it.
func TestProxyStreamsBodies(t *testing.T) {
	t.Parallel()
	first := make(chan struct{})
	f := newProxyFixture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "got "+itoa(n)+"\n")
		w.(http.Flusher).Flush()
		<-first
		_, _ = io.WriteString(w, "done\n")
	}))
	pr, pw := io.Pipe()
	go func() {
		chunk := strings.Repeat("x", 64<<10)
		for i := 0; i < 32; i++ { // 2 MiB, well past the check API's 64 KiB
			_, _ = pw.Write([]byte(chunk))
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", f.front.URL+"/upload", pr)
	resp, err := f.front.Client().Do(req) // not http.DefaultClient: parallel tests closing httptest servers close its idle conns
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, _ := br.ReadString('\n')
	if line != "got 2097152\n" {
		t.Fatalf("first line %q", line)
	}
	close(first) // the first line arrived before the upstream finished
	if line, _ = br.ReadString('\n'); line != "done\n" {
		t.Fatalf("second line %q", line)
	}
}

// TestProxyWebSocketUpgrade: an Upgrade is passed through and the
// connection then carries bytes both ways.
func TestProxyWebSocketUpgrade(t *testing.T) {
	t.Parallel()
	f := newProxyFixture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "no upgrade", 400)
			return
		}
		conn, brw, _ := w.(http.Hijacker).Hijack()
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		line, _ := brw.ReadString('\n')
		_, _ = brw.WriteString("echo " + line)
		_ = brw.Flush()
	}))
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.front.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 || resp.Header.Get("X-RateLimit-Limit") != "3" {
		t.Fatalf("upgrade: %v %+v", err, resp)
	}
	_, _ = io.WriteString(conn, "ping\n")
	if line, _ := br.ReadString('\n'); line != "echo ping\n" {
		t.Fatalf("after upgrade: %q", line)
	}
}

type netipPrefix = string

func prefixes(ss []string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// TestProxyEndpointTooLong: an endpoint over MaxEndpointLen is refused as
// the check API refuses it (400 naming the path), neither decided nor
// published nor forwarded; one of exactly MaxEndpointLen is decided.
func TestProxyEndpointTooLong(t *testing.T) {
	t.Parallel()
	f := newProxyFixture(t, nil)
	ok := "/" + strings.Repeat("a", MaxEndpointLen-len("GET /"))
	if resp, _ := f.do(t, "GET", ok, ""); resp.StatusCode != 200 {
		t.Fatalf("endpoint of %d bytes: %d", MaxEndpointLen, resp.StatusCode)
	}
	<-f.seen
	<-f.bodies
	if ev := f.events.last(t); len(ev.Endpoint) != MaxEndpointLen {
		t.Fatalf("event endpoint of %d bytes", len(ev.Endpoint))
	}
	// the route path is what counts: repeated slashes merged first
	if resp, _ := f.do(t, "GET", "/"+ok, ""); resp.StatusCode != 200 {
		t.Fatalf("endpoint of %d bytes after normalising: %d", MaxEndpointLen, resp.StatusCode)
	}
	<-f.seen
	<-f.bodies
	f.events.mu.Lock()
	published := len(f.events.list)
	f.events.mu.Unlock()
	for _, path := range []string{ok + "b", "/" + strings.Repeat("x", 60<<10), "/%78" + strings.Repeat("x", MaxEndpointLen)} {
		resp, body := f.do(t, "GET", path, "")
		if resp.StatusCode != 400 || !strings.Contains(body, `"code":"BAD_REQUEST"`) ||
			!strings.Contains(body, `the request path \"/`) || !strings.Contains(body, "is too long") || !strings.Contains(body, "at most 2048") {
			t.Fatalf("path of %d bytes: %d %s", len(path), resp.StatusCode, body)
		}
	}
	select {
	case r := <-f.seen:
		t.Fatalf("a too long path reached the upstream: %d bytes", len(r.URL.Path))
	default:
	}
	f.events.mu.Lock()
	defer f.events.mu.Unlock()
	if len(f.events.list) != published {
		t.Fatalf("%d decisions published for refused paths", len(f.events.list)-published)
	}
}

// TestProxyForwardedChain: behind a trusted proxy the upstream receives
// X-Forwarded-For as the client decided on, the trusted hops after it and
// the peer; what the client wrote left of its own entry is dropped.
func TestProxyForwardedChain(t *testing.T) {
	t.Parallel()
	f := newProxyFixture(t, nil)
	c := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}}
	t.Cleanup(c.CloseIdleConnections)
	for _, tt := range []struct{ xff, client, forwarded string }{
		{"6.6.6.6, 198.51.100.7, 10.0.0.5", "198.51.100.7", "198.51.100.7, 10.0.0.5, 127.0.0.2"},
		{"6.6.6.6, 198.51.100.8:4711", "198.51.100.8", "198.51.100.8, 127.0.0.2"},
		{"203.0.113.1, garbage", "127.0.0.2", "127.0.0.2"},
	} {
		req, _ := http.NewRequest("GET", f.front.URL+"/feed", nil)
		req.Header.Set("X-Forwarded-For", tt.xff)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		r := <-f.seen
		<-f.bodies
		if got := r.Header.Values("X-Forwarded-For"); len(got) != 1 || got[0] != tt.forwarded {
			t.Errorf("XFF %q: upstream got %q, want %q", tt.xff, got, tt.forwarded)
		}
		if ev := f.events.last(t); ev.IP != tt.client {
			t.Errorf("XFF %q: decided for %s, want %s", tt.xff, ev.IP, tt.client)
		}
	}
}

// TestSetClientAddr: every header naming the client's address, in any
// spelling an upstream merges, leaves as the address decided on, once;
// the X-Forwarded headers' other spellings are dropped; the rest stays.
func TestSetClientAddr(t *testing.T) {
	t.Parallel()
	h := http.Header{
		"X-Real-Ip":        {"10.0.0.1"},
		"X_real_ip":        {"10.0.0.2"},
		"True-Client-Ip":   {"10.0.0.3", "10.0.0.4"},
		"X_forwarded_for":  {"10.0.0.5"},
		"X-Forwarded_host": {"evil.example"},
		"X-User-Id":        {"alice"},
	}
	setClientAddr(h, "198.51.100.7")
	want := http.Header{
		"X-Real-Ip":      {"198.51.100.7"},
		"True-Client-Ip": {"198.51.100.7"},
		"X-User-Id":      {"alice"},
	}
	if len(h) != len(want) {
		t.Errorf("header %v, want %v", h, want)
	}
	for k, vs := range want {
		if got := h[k]; len(got) != 1 || got[0] != vs[0] {
			t.Errorf("%s: %q, want %q", k, got, vs)
		}
	}
}

// TestProxyClientGivesUp: a client that gives up before the upstream
// answers is not an upstream failure: not counted (OnUpstreamError), not
// warned of; a debug line tells of it. An upstream that fails is still
// counted and warned of.
func TestProxyClientGivesUp(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	f := newProxyFixture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			panic(http.ErrAbortHandler) // the upstream resets the connection
		}
		arrived <- struct{}{}
		<-r.Context().Done() // blocks until the proxy gives up on it
	}))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", f.front.URL+"/slow", nil)
	done := make(chan error, 1)
	go func() {
		resp, err := f.front.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-arrived
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v", err)
	}
	testenv.Eventually(t, 5*time.Second, func() string {
		if !strings.Contains(f.log.String(), "the client went away") {
			return "no debug line of the client gone:\n" + f.log.String()
		}
		return ""
	})
	if n := f.upErrs.Load(); n != 0 || strings.Contains(f.log.String(), "level=WARN") {
		t.Fatalf("a client that gave up counted as %d upstream errors; log:\n%s", n, f.log.String())
	}
	if resp, body := f.do(t, "GET", "/fail", ""); resp.StatusCode != 502 || !strings.Contains(body, CodeUpstreamUnavailable) {
		t.Fatalf("failing upstream: %d %s", resp.StatusCode, body)
	}
	if n := f.upErrs.Load(); n != 1 || !strings.Contains(f.log.String(), "level=WARN msg=\"proxy: upstream\"") {
		t.Fatalf("a failing upstream counted %d times; log:\n%s", n, f.log.String())
	}
}

// TestProxyOwnHeadersReplaceUpstreams: the upstream's own rate-limit and
// request-id headers (in any spelling) are replaced by the limiter's, so
// each goes out once; the upstream's other headers, Retry-After among
// them (the limiter sets none on a forwarded response), pass.
func TestProxyOwnHeadersReplaceUpstreams(t *testing.T) {
	t.Parallel()
	f := newProxyFixture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-RateLimit-Limit", "1000") // canonical: X-Ratelimit-Limit
		h["X-RateLimit-Remaining"] = []string{"999"}
		h["x-ratelimit-reset"] = []string{"1"}
		h.Set("RateLimit", `"upstream";r=999;t=1`)
		h.Set("RateLimit-Policy", `"upstream";q=1000;w=1`)
		h.Set("X-Request-Id", "upstream-id")
		h.Set("Retry-After", "7")
		h.Set("X-Upstream", "yes")
		w.WriteHeader(200)
	}))
	resp, _ := f.do(t, "GET", "/feed", "", "X-Request-Id", "client-id")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for name, want := range map[string]string{
		HeaderLimit: "3", HeaderRemaining: "2", HeaderRateLimit: `"ip-unauth";r=2;t=20`, HeaderPolicy: `"ip-unauth";q=3;w=60`,
		"X-Request-Id": "client-id", "Retry-After": "7", "X-Upstream": "yes",
	} {
		if got := resp.Header.Values(name); len(got) != 1 || got[0] != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	if got := resp.Header.Values(HeaderReset); len(got) != 1 || got[0] == "1" {
		t.Errorf("%s: %q, want the limiter's alone", HeaderReset, got)
	}
}
