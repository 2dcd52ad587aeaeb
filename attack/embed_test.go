package attack

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

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
