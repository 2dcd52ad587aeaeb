package attack

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/middleware"
	"github.com/tollgate-dev/tollgate/service"
)

// Attacks on the Go packages an API embeds (middleware, client) against
// a real limiter.

// wsPolicy caps live sockets at 2 per client address, as an API with
// long-lived WebSocket streams would.
const wsPolicy = "version: 1\nlimits:\n  - {name: sockets, by: [ip], concurrency: 2, lease_ttl: 1h}\n"

// TestAttackHijackedSocketsEscapeConcurrency: an API limits WebSocket
// streams to 2 per address with the Go middleware (remote mode, a real
// limiter). Its handler upgrades the way gorilla/websocket's chat example
// does: it hijacks the connection, starts its read and write pumps in
// goroutines and returns. The middleware released the slot when the
// handler returned, so the attacker opened as many sockets as he liked
// (10 of 10 admitted before); a hijacked connection now holds its slot
// until it is closed (2 of 10, and a third once one is closed).
func TestAttackHijackedSocketsEscapeConcurrency(t *testing.T) {
	t.Parallel()
	pol := filepath.Join(t.TempDir(), "ws-policy.yaml")
	if err := os.WriteFile(pol, []byte(wsPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	tg := start(t, func(c *service.Config) { c.ConfigPath, c.NoForwardAuth = pol, true })
	mw, err := middleware.New(middleware.Options{
		LimiterURL: tg.api, APIToken: apiToken, Timeout: 5 * time.Second,
		Identify: func(r *http.Request) (middleware.Identity, bool) {
			return middleware.Identity{IP: "198.51.100.7"}, true
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = buf.Flush()
		go func() { // the pump: the socket lives until the client goes
			defer conn.Close()
			_, _ = buf.ReadByte()
		}()
	})))
	t.Cleanup(api.Close)

	var open []net.Conn
	t.Cleanup(func() {
		for _, c := range open {
			c.Close()
		}
	})
	dial := func() int {
		t.Helper()
		c, err := net.Dial("tcp", api.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("GET /ws HTTP/1.1\r\nHost: api\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			open = append(open, c)
		} else {
			c.Close()
		}
		return resp.StatusCode
	}
	admitted := 0
	for i := 0; i < 10; i++ {
		if dial() == http.StatusSwitchingProtocols {
			admitted++
		}
	}
	if admitted != 2 {
		t.Fatalf("%d of 10 sockets admitted under a cap of 2 per address", admitted)
	}
	// closing a socket frees its slot
	open[0].Close()
	open = open[1:]
	eventually(t, 5*time.Second, func() string {
		if code := dial(); code != http.StatusSwitchingProtocols {
			return "a closed socket's slot is still held: " + http.StatusText(code)
		}
		return ""
	})
	if code := dial(); code != http.StatusTooManyRequests {
		t.Fatalf("a third live socket: %d, want 429", code)
	}
}

// TestAttackLimiterOutageOpensLogins: an API guards its login with the Go
// middleware in remote mode and FailOpen: true, as docs/clients.md shows
// (a limiter outage must not take the whole API down). The policy fails
// its auth class closed, as the contract's example does: a login must not
// go unlimited because the limiter cannot count it. When the limiter
// became unreachable (down, or slower than the 100ms Timeout under the
// attacker's own flood), the middleware let every login through: 50 of
// 50 guesses at alice's password reached the handler after the first 5
// were denied. A request that names an account (a login, a token
// request) now fails closed whatever FailOpen says, unless
// FailOpenAccounts is set: 0 of 50, each answered 503
// LIMITER_UNAVAILABLE; other requests still fail open.
func TestAttackLimiterOutageOpensLogins(t *testing.T) {
	t.Parallel()
	_, prefix := testenv.Redis(t)
	stream, subj := testenv.SharedStreams(t)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte(attackPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r, err := service.Start(ctx, service.Config{
		ConfigPath: pol, Listen: "127.0.0.1:0", RedisURL: "redis://" + testenv.RedisAddr() + "/0", NATSURL: testenv.NATSURL(),
		KeyPrefix: prefix, SubjectPrefix: subj, StreamName: stream, DecisionsMaxBytes: 16 << 20, EventsMaxBytes: 16 << 20,
		StoreTimeout: 2 * time.Second, APIToken: apiToken, NoForwardAuth: true, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-r.Done
		}
	}
	t.Cleanup(stop)

	mw, err := middleware.New(middleware.Options{
		LimiterURL: "http://" + r.APIAddr, APIToken: apiToken, FailOpen: true, Timeout: time.Second,
		Identify: func(r *http.Request) (middleware.Identity, bool) {
			id := middleware.Identity{IP: r.Header.Get("X-Client")}
			if r.URL.Path == "/auth/login" {
				id.Account = r.Header.Get("X-Account")
			}
			return id, true
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var guesses atomic.Int32
	api := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/auth/login" {
			guesses.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte("feed"))
	})))
	t.Cleanup(api.Close)
	login := func(i int) int {
		code, _ := do(t, "POST", api.URL+"/auth/login", "", http.Header{"X-Client": {fmt.Sprintf("203.0.113.%d", i%250)}, "X-Account": {"alice"}})
		return code
	}
	for i := 0; i < 10; i++ {
		login(i)
	}
	if n := guesses.Load(); n != 5 {
		t.Fatalf("%d of 10 guesses reached the login while the limiter was up, want 5 (login-account 5/min)", n)
	}

	stop() // the outage
	guesses.Store(0)
	codes := map[int]int{}
	for i := 0; i < 50; i++ {
		codes[login(100+i)]++
	}
	if n := guesses.Load(); n != 0 {
		t.Fatalf("limiter down: %d of 50 guesses at alice's password reached the login (answers %v)", n, codes)
	}
	if codes[503] != 50 {
		t.Fatalf("limiter down: logins answered %v, want 50 x 503", codes)
	}
	// the rest of the API still fails open
	if code, body := do(t, "GET", api.URL+"/feed", "", http.Header{"X-Client": {"198.51.100.7"}}); code != 200 || body != "feed" {
		t.Fatalf("limiter down: the feed answered %d %q, want it let through", code, body)
	}
}

// TestAttackLongPathEscapesRoute: an API serves downloads under a Go
// ServeMux wildcard (GET /files/{path...}) and its policy limits zips to
// 3 a minute per address (GET /files/*.zip). The middleware cut an
// endpoint to the check API's 2048 bytes and checked what was left, so a
// zip whose path was longer lost its ".zip" to the cut, matched no
// download route and was served unlimited (10 of 10 before). Proxy mode
// refuses such a path (400, TestAttackLongPathsDropOthersDecisions); the
// middleware now does too, in either mode (0 of 10 served, each 400
// BAD_REQUEST), and short zips stay limited.
func TestAttackLongPathEscapesRoute(t *testing.T) {
	t.Parallel()
	pol := filepath.Join(t.TempDir(), "zips.yaml")
	text := "version: 1\nroutes:\n  - {match: \"GET /files/*.zip\", class: download}\n  - {match: \"* *\", class: default}\n" +
		"limits:\n  - {name: zips, by: [ip], rate: 3/min, if: {class: download}}\n"
	if err := os.WriteFile(pol, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	tg := start(t, func(c *service.Config) { c.ConfigPath = pol })
	mw, err := middleware.New(middleware.Options{
		LimiterURL: tg.api, APIToken: apiToken, Timeout: 5 * time.Second,
		Identify: func(r *http.Request) (middleware.Identity, bool) {
			return middleware.Identity{IP: "198.51.100.7"}, true
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	var served atomic.Int32
	mux.HandleFunc("GET /files/{path...}", func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		_, _ = w.Write([]byte("PK"))
	})
	api := httptest.NewServer(mw(mux))
	t.Cleanup(api.Close)

	long := "/files/" + strings.Repeat("a", 2100) + ".zip"
	codes := map[int]int{}
	for i := 0; i < 10; i++ {
		code, _ := do(t, "GET", api.URL+long, "", nil)
		codes[code]++
	}
	if n := served.Load(); n != 0 || codes[400] != 10 {
		t.Fatalf("%d of 10 zips with a %d-byte path served under a 3/min limit (answers %v)", n, len(long), codes)
	}
	for i := 0; i < 4; i++ {
		do(t, "GET", api.URL+"/files/x.zip", "", nil)
	}
	if n := served.Load(); n != 3 {
		t.Fatalf("%d of 4 short zips served, want 3", n)
	}
}
