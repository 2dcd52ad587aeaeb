package middleware_test

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/middleware"
)

// onePolicy admits one request in flight per IP.
const onePolicy = `version: 1
limits:
  - {name: one, by: [ip], concurrency: 1}
`

// TestReleasesConcurrency: the middleware holds a request's concurrency
// slot while the wrapped handler runs (a second request meanwhile is 429
// with kind concurrency) and releases it when the handler returns, in
// direct and remote mode.
func TestReleasesConcurrency(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"direct", "remote"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			o := middleware.Options{Identify: identify, Timeout: 5 * time.Second}
			if mode == "direct" {
				o.Engine = directEngine(t, onePolicy, time.Now())
			} else {
				o.LimiterURL = startLimiter(t, onePolicy)
			}
			mw, err := middleware.New(o)
			if err != nil {
				t.Fatal(err)
			}
			var h http.Handler
			var inner int
			var innerBody string
			h = mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/outer" {
					// while this request holds the slot, another is refused
					in := serve(h, "GET", "/inner", "192.0.2.9", "")
					inner, innerBody = in.Code, in.Body.String()
				}
				_, _ = w.Write([]byte("ok"))
			}))
			if w := serve(h, "GET", "/outer", "192.0.2.9", ""); w.Code != 200 {
				t.Fatalf("outer: %d %s", w.Code, w.Body)
			}
			if inner != 429 || !strings.Contains(innerBody, `"kind":"concurrency"`) {
				t.Fatalf("inner while the outer ran: %d %s", inner, innerBody)
			}
			// released when the handler returned: the next ones pass, one at a time
			for i := 0; i < 3; i++ {
				if w := serve(h, "GET", "/after", "192.0.2.9", ""); w.Code != 200 {
					t.Fatalf("after %d: %d %s", i, w.Code, w.Body)
				}
			}
		})
	}
}

// TestHijackedConnectionHoldsItsSlot: in direct mode, a handler that
// hijacks its connection and returns (the pumps of a WebSocket run in
// goroutines) keeps the slot until the connection is closed; a handler
// that panics frees it at once.
func TestHijackedConnectionHoldsItsSlot(t *testing.T) {
	t.Parallel()
	mw, err := middleware.New(middleware.Options{Identify: identify, Engine: directEngine(t, onePolicy, time.Now())})
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 4)
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic(http.ErrAbortHandler)
		}
		c, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		_, _ = buf.WriteString("HTTP/1.1 101 Switching Protocols\r\n\r\n")
		_ = buf.Flush()
		conns <- c
	}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	get := func(path string) int {
		t.Helper()
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Write([]byte("GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n"))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0 // the panic's connection is dropped
		}
		return resp.StatusCode
	}
	if code := get("/panic"); code != 0 {
		t.Fatalf("panicking handler: %d, want the connection dropped", code)
	}
	// the panic freed its slot at once
	if code := get("/ws"); code != 101 {
		t.Fatalf("first socket, after a panic: %d, want 101", code)
	}
	if code := get("/ws"); code != 429 {
		t.Fatalf("second socket while the first is open: %d, want 429", code)
	}
	// closing it frees the slot (in the background)
	(<-conns).Close()
	deadline := time.Now().Add(5 * time.Second)
	for code := get("/ws"); code != 101; code = get("/ws") {
		if time.Now().After(deadline) {
			t.Fatalf("after the first socket closed: %d, want 101", code)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
