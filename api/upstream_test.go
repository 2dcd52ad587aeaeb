package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
)

// upstreamServer is an httptest server that counts the connections it
// accepted and the requests it served.
type upstreamServer struct {
	*httptest.Server
	conns atomic.Int64
	hits  atomic.Int64
}

func newUpstreamServer(t *testing.T, h http.HandlerFunc) *upstreamServer {
	t.Helper()
	u := &upstreamServer{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		h(w, r)
	}))
	u.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			u.conns.Add(1)
		}
	}
	u.Start()
	t.Cleanup(u.Close)
	return u
}

// echo answers "METHOD /path body".
func echo(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	_, _ = io.WriteString(w, r.Method+" "+r.URL.Path+" "+string(b))
}

// countingRT counts the requests and CloseIdleConnections calls it passes on.
type countingRT struct {
	rt     http.RoundTripper
	n      atomic.Int64
	closes atomic.Int64
}

func (c *countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

func (c *countingRT) CloseIdleConnections() {
	c.closes.Add(1)
	if ci, ok := c.rt.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// newTestTransport returns an UpstreamTransport whose fallback is counted.
func newTestTransport(t *testing.T) (*UpstreamTransport, *countingRT) {
	t.Helper()
	fb := &countingRT{rt: &http.Transport{}}
	tr := &UpstreamTransport{Fallback: fb}
	t.Cleanup(tr.CloseIdleConnections)
	return tr, fb
}

// send makes one round trip and reads the whole body.
func send(t *testing.T, tr http.RoundTripper, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", req.Method, req.URL, err)
	}
	return resp, string(b)
}

func newReq(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func get(t *testing.T, tr http.RoundTripper, url string) string {
	t.Helper()
	resp, body := send(t, tr, newReq(t, "GET", url, nil))
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %q", url, resp.StatusCode, body)
	}
	return body
}

func TestUpstreamReusesOneConn(t *testing.T) {
	t.Parallel()
	up := newUpstreamServer(t, echo)
	tr, fb := newTestTransport(t)
	for i := 0; i < 100; i++ {
		path := fmt.Sprintf("/r%d", i)
		if got := get(t, tr, up.URL+path); got != "GET "+path+" " {
			t.Fatalf("request %d: %q", i, got)
		}
	}
	if n := up.conns.Load(); n != 1 {
		t.Fatalf("100 sequential requests used %d connections, want 1", n)
	}
	if n := fb.n.Load(); n != 0 {
		t.Fatalf("fallback used %d times", n)
	}
}

func TestUpstreamConcurrent(t *testing.T) {
	t.Parallel()
	up := newUpstreamServer(t, echo)
	tr, fb := newTestTransport(t)
	var wg sync.WaitGroup
	for g := 0; g < 50; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				path := fmt.Sprintf("/g%d/r%d", g, i)
				req, _ := http.NewRequest("GET", up.URL+path, nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Errorf("%s: %v", path, err)
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 || string(b) != "GET "+path+" " {
					t.Errorf("%s: %d %q %v", path, resp.StatusCode, b, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := up.hits.Load(); n != 1000 {
		t.Fatalf("upstream served %d requests, want 1000", n)
	}
	if n := up.conns.Load(); n < 1 || n > 50 {
		t.Fatalf("50 goroutines used %d connections, want 1..50", n)
	}
	if n := fb.n.Load(); n != 0 {
		t.Fatalf("fallback used %d times", n)
	}
}

// TestUpstreamChunkedAndStreamedBodies: a chunked body (with a trailer)
// and a body streamed in parts are read in full, the first part before
// the upstream wrote the rest; the connection is then reused.
func TestUpstreamChunkedAndStreamedBodies(t *testing.T) {
	t.Parallel()
	next := make(chan struct{})
	up := newUpstreamServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/chunked":
			w.Header().Set("Trailer", "X-Sum")
			for i := 0; i < 100; i++ {
				_, _ = fmt.Fprintf(w, "line %d\n", i)
				w.(http.Flusher).Flush()
			}
			w.Header().Set("X-Sum", "100")
		case "/stream":
			_, _ = io.WriteString(w, "first\n")
			w.(http.Flusher).Flush()
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
			_, _ = io.WriteString(w, strings.Repeat("y", 100<<10)+"\n")
		}
	})
	tr, _ := newTestTransport(t)

	resp, body := send(t, tr, newReq(t, "GET", up.URL+"/chunked", nil))
	var want strings.Builder
	for i := 0; i < 100; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if resp.ContentLength != -1 || body != want.String() || resp.Trailer.Get("X-Sum") != "100" {
		t.Fatalf("chunked: length %d, body %d bytes (want %d), trailer %v", resp.ContentLength, len(body), want.Len(), resp.Trailer)
	}

	resp, err := tr.RoundTrip(newReq(t, "GET", up.URL+"/stream", nil))
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, len("first\n"))
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "first\n" {
		t.Fatalf("first part: %q %v", first, err)
	}
	close(next) // the first part arrived before the upstream wrote the rest
	rest, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(rest) != strings.Repeat("y", 100<<10)+"\n" {
		t.Fatalf("rest: %d bytes, %v", len(rest), err)
	}
	get(t, tr, up.URL+"/chunked")
	if n := up.conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

func TestUpstreamForwardsRequestBody(t *testing.T) {
	t.Parallel()
	up := newUpstreamServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		sum := sha256.Sum256(b)
		_, _ = fmt.Fprintf(w, "%d %d %v %s %v", r.ContentLength, len(b), r.TransferEncoding, hex.EncodeToString(sum[:]), err)
	})
	tr, fb := newTestTransport(t)
	for _, size := range []int{1, 300 << 10, 1 << 20} { // 1 MiB: the largest the lean path takes
		payload := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
		sum := sha256.Sum256(payload)
		req := newReq(t, "POST", up.URL+"/upload", bytes.NewReader(payload))
		req.GetBody = nil // as httputil.ReverseProxy sends it
		resp, body := send(t, tr, req)
		want := fmt.Sprintf("%d %d [] %s <nil>", size, size, hex.EncodeToString(sum[:]))
		if resp.StatusCode != 200 || body != want {
			t.Fatalf("size %d: %d %q, want %q", size, resp.StatusCode, body, want)
		}
	}
	if n := fb.n.Load(); n != 0 {
		t.Fatalf("fallback used %d times", n)
	}
	if n := up.conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

// TestUpstreamFallback: what the lean path does not handle goes to the
// fallback, and works there.
func TestUpstreamFallback(t *testing.T) {
	t.Parallel()
	up := newUpstreamServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "websocket" {
			conn, brw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			_ = brw.Flush()
			line, _ := brw.ReadString('\n')
			_, _ = brw.WriteString("echo " + line)
			_ = brw.Flush()
			return
		}
		n, _ := io.Copy(io.Discard, r.Body)
		_, _ = fmt.Fprintf(w, "%d %v", n, r.TransferEncoding)
	})
	tr, fb := newTestTransport(t)
	fallbacks := int64(0)
	check := func(what string, req *http.Request, want string) {
		t.Helper()
		resp, body := send(t, tr, req)
		fallbacks++
		if resp.StatusCode != 200 || body != want || fb.n.Load() != fallbacks {
			t.Fatalf("%s: %d %q (want %q), fallback used %d times, want %d", what, resp.StatusCode, body, want, fb.n.Load(), fallbacks)
		}
	}

	// A reader of unknown length: http.NewRequest leaves ContentLength 0.
	check("unknown length", newReq(t, "POST", up.URL, io.MultiReader(strings.NewReader("abc"))), "3 [chunked]")
	req := newReq(t, "POST", up.URL, strings.NewReader("abcd"))
	req.ContentLength = -1
	check("ContentLength -1", req, "4 [chunked]")
	check("over 1 MiB", newReq(t, "POST", up.URL, strings.NewReader(strings.Repeat("z", 1<<20+1))), "1048577 []")

	req = newReq(t, "GET", up.URL+"/ws", nil)
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Connection", "Upgrade")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	rw, ok := resp.Body.(io.ReadWriteCloser)
	if resp.StatusCode != 101 || !ok || fb.n.Load() != fallbacks+1 {
		t.Fatalf("upgrade: %d, body %T, fallback used %d times", resp.StatusCode, resp.Body, fb.n.Load())
	}
	fallbacks++
	_, _ = io.WriteString(rw, "ping\n")
	line := make([]byte, len("echo ping\n"))
	if _, err := io.ReadFull(rw, line); err != nil || string(line) != "echo ping\n" {
		t.Fatalf("after upgrade: %q %v", line, err)
	}
	rw.Close()

	tls := httptest.NewTLSServer(http.HandlerFunc(echo))
	t.Cleanup(tls.Close)
	tlsTr := &UpstreamTransport{Fallback: &countingRT{rt: tls.Client().Transport}}
	resp, body := send(t, tlsTr, newReq(t, "GET", tls.URL+"/secure", nil))
	if resp.StatusCode != 200 || body != "GET /secure " || tlsTr.Fallback.(*countingRT).n.Load() != 1 {
		t.Fatalf("https: %d %q", resp.StatusCode, body)
	}
	tlsTr.CloseIdleConnections()
}

// TestUpstreamConnectionClose: when the upstream (or the request) asks for
// Connection: close, each request dials anew, and succeeds.
func TestUpstreamConnectionClose(t *testing.T) {
	t.Parallel()
	up := newUpstreamServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
		}
		echo(w, r)
	})
	tr, _ := newTestTransport(t)
	tr.probeAfter = -1 // a reused closed connection would fail these POSTs
	for i := 0; i < 3; i++ {
		req := newReq(t, "POST", up.URL+"/close", strings.NewReader("n="+itoa(int64(i))))
		req.GetBody = nil
		if resp, body := send(t, tr, req); resp.StatusCode != 200 || body != "POST /close n="+itoa(int64(i)) {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
	}
	if n := up.conns.Load(); n != 3 {
		t.Fatalf("%d connections, want 3", n)
	}
	for i := 0; i < 2; i++ {
		req := newReq(t, "POST", up.URL+"/x", strings.NewReader("y"))
		req.GetBody = nil
		req.Close = true
		if resp, body := send(t, tr, req); resp.StatusCode != 200 || body != "POST /x y" {
			t.Fatalf("req.Close: %d %q", resp.StatusCode, body)
		}
	}
	if n := up.conns.Load(); n != 5 {
		t.Fatalf("%d connections, want 5", n)
	}
}

// TestUpstreamRetriesStaleConn: a pooled connection the upstream closed is
// found when the request is sent on it; a GET is sent again on a fresh one.
func TestUpstreamRetriesStaleConn(t *testing.T) {
	t.Parallel()
	up := newUpstreamServer(t, echo)
	tr, _ := newTestTransport(t)
	tr.probeAfter = -1 // find it by using it
	for i := 0; i < 3; i++ {
		if got := get(t, tr, up.URL+"/a"); got != "GET /a " {
			t.Fatalf("request %d: %q", i, got)
		}
		up.CloseClientConnections()
	}
	if n, h := up.conns.Load(), up.hits.Load(); n != 3 || h != 3 {
		t.Fatalf("%d connections, %d requests served; want 3 and 3", n, h)
	}
}

// TestUpstreamNoReplayWithoutGetBody: a request that cannot be sent again
// fails on a closed pooled connection rather than being replayed; one with
// GetBody and an idempotency key is sent again.
func TestUpstreamNoReplayWithoutGetBody(t *testing.T) {
	t.Parallel()
	up := newUpstreamServer(t, echo)
	tr, _ := newTestTransport(t)
	tr.probeAfter = -1 // find it by using it

	get(t, tr, up.URL+"/a")
	up.CloseClientConnections()
	req := newReq(t, "POST", up.URL+"/pay", strings.NewReader("amount=1"))
	req.GetBody = nil
	if resp, err := tr.RoundTrip(req); err == nil {
		resp.Body.Close()
		t.Fatalf("POST without GetBody on a closed connection: %d, want an error", resp.StatusCode)
	} else if !connGone(err) || !strings.HasPrefix(err.Error(), "api: upstream 127.0.0.1:") {
		t.Fatalf("error %q", err)
	}

	get(t, tr, up.URL+"/b") // on a fresh connection
	up.CloseClientConnections()
	req = newReq(t, "POST", up.URL+"/pay", strings.NewReader("amount=2")) // GetBody set, not idempotent
	if resp, err := tr.RoundTrip(req); err == nil {
		resp.Body.Close()
		t.Fatalf("POST without an idempotency key on a closed connection: %d, want an error", resp.StatusCode)
	}

	get(t, tr, up.URL+"/c")
	up.CloseClientConnections()
	req = newReq(t, "POST", up.URL+"/pay", strings.NewReader("amount=3"))
	req.Header.Set("Idempotency-Key", "k1")
	if resp, body := send(t, tr, req); resp.StatusCode != 200 || body != "POST /pay amount=3" {
		t.Fatalf("idempotent POST: %d %q", resp.StatusCode, body)
	}
	// The upstream saw the GETs and the last POST, once each.
	if n, h := up.conns.Load(), up.hits.Load(); n != 4 || h != 4 {
		t.Fatalf("%d connections, %d requests served; want 4 and 4", n, h)
	}
}

// TestUpstreamProbeSkipsClosedIdleConn: a connection idle long enough is
// checked at checkout, so even a POST without GetBody gets a fresh one.
func TestUpstreamProbeSkipsClosedIdleConn(t *testing.T) {
	t.Parallel()
	up := newUpstreamServer(t, echo)
	tr, _ := newTestTransport(t)
	tr.probeAfter = time.Nanosecond // any idle time
	get(t, tr, up.URL+"/a")
	get(t, tr, up.URL+"/b") // the probe keeps a live connection
	up.CloseClientConnections()
	req := newReq(t, "POST", up.URL+"/pay", strings.NewReader("amount=1"))
	req.GetBody = nil
	if resp, body := send(t, tr, req); resp.StatusCode != 200 || body != "POST /pay amount=1" {
		t.Fatalf("POST: %d %q", resp.StatusCode, body)
	}
	if n, h := up.conns.Load(), up.hits.Load(); n != 2 || h != 3 {
		t.Fatalf("%d connections, %d requests served; want 2 and 3", n, h)
	}
}

// hangingUpstream answers /hang never and /part with a first part only,
// until the test ends; entered receives a value when either is reached.
func hangingUpstream(t *testing.T) (*upstreamServer, chan struct{}) {
	t.Helper()
	entered := make(chan struct{}, 10)
	release := make(chan struct{})
	up := newUpstreamServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/part" {
			w.Header().Set("Content-Length", "100")
			_, _ = io.WriteString(w, "part")
			w.(http.Flusher).Flush()
		} else if r.URL.Path != "/hang" {
			echo(w, r)
			return
		}
		entered <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(release) }) // before the server's Close
	return up, entered
}

func TestUpstreamCancel(t *testing.T) {
	t.Parallel()
	up, entered := hangingUpstream(t)
	tr, _ := newTestTransport(t)

	// Waiting for the response header.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-entered
		cancel()
	}()
	start := time.Now()
	resp, err := tr.RoundTrip(newReq(t, "GET", up.URL+"/hang", nil).WithContext(ctx))
	if err == nil {
		resp.Body.Close()
		t.Fatal("no error")
	}
	if !errors.Is(err, context.Canceled) || time.Since(start) > 10*time.Second {
		t.Fatalf("after %v: %v, want context.Canceled", time.Since(start), err)
	}

	// Reading the body.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	resp, err = tr.RoundTrip(newReq(t, "GET", up.URL+"/part", nil).WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	part := make([]byte, 4)
	if _, err := io.ReadFull(resp.Body, part); err != nil || string(part) != "part" {
		t.Fatalf("first part %q %v", part, err)
	}
	<-entered
	cancel()
	if _, err := io.ReadAll(resp.Body); !errors.Is(err, context.Canceled) {
		t.Fatalf("body read: %v, want context.Canceled", err)
	}
	resp.Body.Close()

	// A context already done: no request at all.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if resp, err := tr.RoundTrip(newReq(t, "GET", up.URL+"/ok", nil).WithContext(ctx)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled before: %v %v", resp, err)
	}

	// Neither connection is reused; a new request works.
	if got := get(t, tr, up.URL+"/ok"); got != "GET /ok " {
		t.Fatalf("after cancel: %q", got)
	}
	if n := up.conns.Load(); n != 3 {
		t.Fatalf("%d connections, want 3", n)
	}
}

func TestUpstreamTimeouts(t *testing.T) {
	t.Parallel()
	up, _ := hangingUpstream(t)

	// The context's deadline: context.DeadlineExceeded (the proxy's 504).
	tr, _ := newTestTransport(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	resp, err := tr.RoundTrip(newReq(t, "GET", up.URL+"/hang", nil).WithContext(ctx))
	if err == nil {
		resp.Body.Close()
		t.Fatal("no error")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v, want context.DeadlineExceeded", err)
	}

	// ResponseHeaderTimeout: not the context's deadline (the proxy's 502).
	tr, _ = newTestTransport(t)
	tr.ResponseHeaderTimeout = 100 * time.Millisecond
	resp, err = tr.RoundTrip(newReq(t, "GET", up.URL+"/hang", nil))
	if err == nil {
		resp.Body.Close()
		t.Fatal("no error")
	}
	if errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "timeout awaiting response headers") {
		t.Fatalf("%v, want a response header timeout", err)
	}
	// A header in time is fine, and the body is read after it.
	resp, err = tr.RoundTrip(newReq(t, "GET", up.URL+"/part", nil))
	if err != nil {
		t.Fatal(err)
	}
	part := make([]byte, 4)
	if _, err := io.ReadFull(resp.Body, part); err != nil || string(part) != "part" {
		t.Fatalf("first part %q %v", part, err)
	}
	resp.Body.Close()
}

// TestUpstreamNoBodyResponsesReleaseConn: HEAD, 204 and 304 responses have
// no body; the connection is released at once, Close or no Close.
func TestUpstreamNoBodyResponsesReleaseConn(t *testing.T) {
	t.Parallel()
	up := newUpstreamServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/204":
			w.WriteHeader(http.StatusNoContent)
		case "/304":
			w.WriteHeader(http.StatusNotModified)
		case "/empty":
			w.Header().Set("Content-Length", "0")
		default:
			w.Header().Set("Content-Length", "11")
			_, _ = io.WriteString(w, "hello world")
		}
	})
	tr, _ := newTestTransport(t)
	for _, tt := range []struct {
		method, path string
		status       int
	}{{"HEAD", "/", 200}, {"GET", "/204", 204}, {"GET", "/304", 304}, {"GET", "/empty", 200}, {"HEAD", "/", 200}} {
		resp, err := tr.RoundTrip(newReq(t, tt.method, up.URL+tt.path, nil))
		if err != nil || resp.StatusCode != tt.status || resp.Body != http.NoBody {
			t.Fatalf("%s %s: %v %+v", tt.method, tt.path, err, resp)
		}
		// No Close: the connection is back in the pool already.
	}
	if got := get(t, tr, up.URL+"/"); got != "hello world" {
		t.Fatalf("GET: %q", got)
	}
	if n := up.conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

// TestUpstreamEarlyCloseDropsConn: a body closed before EOF closes the
// connection, at once even when the upstream streams without end.
func TestUpstreamEarlyCloseDropsConn(t *testing.T) {
	t.Parallel()
	up := newUpstreamServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/endless" {
			echo(w, r)
			return
		}
		chunk := []byte(strings.Repeat("e", 4<<10))
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	})
	tr, _ := newTestTransport(t)
	resp, err := tr.RoundTrip(newReq(t, "GET", up.URL+"/endless", nil))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	if err := resp.Body.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := resp.Body.Read(buf); n != 0 || !errors.Is(err, errBodyClosed) {
		t.Fatalf("read after close: %d %v", n, err)
	}
	get(t, tr, up.URL+"/next")
	get(t, tr, up.URL+"/next")
	if n := up.conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

func TestUpstreamIdleLimits(t *testing.T) {
	t.Parallel()
	up := newUpstreamServer(t, echo)

	// IdleTimeout: a connection idle longer is not reused.
	tr, _ := newTestTransport(t)
	tr.IdleTimeout = time.Nanosecond
	get(t, tr, up.URL+"/a")
	get(t, tr, up.URL+"/b")
	if n := up.conns.Load(); n != 2 {
		t.Fatalf("IdleTimeout: %d connections, want 2", n)
	}

	// MaxIdlePerHost 1: of two connections released, one is kept.
	tr, _ = newTestTransport(t)
	tr.MaxIdlePerHost = 1
	hold := func() (*http.Response, *http.Response) {
		r1, err := tr.RoundTrip(newReq(t, "GET", up.URL+"/1", nil))
		if err != nil {
			t.Fatal(err)
		}
		r2, err := tr.RoundTrip(newReq(t, "GET", up.URL+"/2", nil))
		if err != nil {
			t.Fatal(err)
		}
		return r1, r2
	}
	drain := func(rs ...*http.Response) {
		for _, r := range rs {
			_, _ = io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
	}
	r1, r2 := hold() // two connections in use at once
	drain(r1, r2)
	r1, r2 = hold() // one reused, one dialed
	drain(r1, r2)
	if n := up.conns.Load(); n != 5 {
		t.Fatalf("MaxIdlePerHost: %d connections, want 2+2+1", n)
	}
}

func TestUpstreamCloseIdleConnections(t *testing.T) {
	t.Parallel()
	up := newUpstreamServer(t, echo)
	tr, fb := newTestTransport(t)
	get(t, tr, up.URL+"/a")
	tr.CloseIdleConnections()
	get(t, tr, up.URL+"/b")
	if n, c := up.conns.Load(), fb.closes.Load(); n != 2 || c != 1 {
		t.Fatalf("%d connections, fallback closed %d times; want 2 and 1", n, c)
	}
}

// TestUpstreamInformational: 1xx responses before the final one are
// skipped, and passed to a ClientTrace's Got1xxResponse (as
// httputil.ReverseProxy uses to forward 103 Early Hints).
func TestUpstreamInformational(t *testing.T) {
	t.Parallel()
	up := newUpstreamServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</app.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		_, _ = io.WriteString(w, "final")
	})
	tr, _ := newTestTransport(t)
	var got []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		got = append(got, fmt.Sprint(code, " ", h.Get("Link")))
		return nil
	}}
	req := newReq(t, "GET", up.URL+"/", nil)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
	resp, body := send(t, tr, req)
	if resp.StatusCode != 200 || body != "final" || strings.Join(got, ",") != "103 </app.css>; rel=preload,103 </app.css>; rel=preload" {
		t.Fatalf("%d %q, 1xx seen %q", resp.StatusCode, body, got)
	}
	if got := get(t, tr, up.URL+"/"); got != "final" {
		t.Fatalf("without a trace: %q", got)
	}
	if n := up.conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

// TestProxyUsesUpstreamTransport: the proxy's default transport is the
// lean one, and proxied requests (bodies included) share one connection.
func TestProxyUsesUpstreamTransport(t *testing.T) {
	t.Parallel()
	up := newUpstreamServer(t, echo)
	p, err := policy.Parse("proxy.yaml", []byte(proxyPolicy))
	if err != nil {
		t.Fatal(err)
	}
	eng, _ := engine.New(engine.Options{Store: bucket.NewMemoryStore(bucket.MemoryOptions{}), Policy: func() *policy.Policy { return p },
		Metrics: engine.NewMetrics(prometheus.NewRegistry())})
	srv, _ := New(Options{Engine: eng})
	u, _ := url.Parse(up.URL)
	if err := srv.EnableProxy(ProxyOptions{Upstream: u, Getenv: func(string) string { return "k3y" }}); err != nil {
		t.Fatal(err)
	}
	tr, ok := srv.proxy.o.Transport.(*UpstreamTransport)
	if !ok {
		t.Fatalf("default transport %T", srv.proxy.o.Transport)
	}
	t.Cleanup(tr.CloseIdleConnections)
	front := httptest.NewServer(srv.Public())
	t.Cleanup(front.Close)
	for i := 0; i < 10; i++ {
		method, body, want := "GET", "", "GET /items "
		switch i % 3 {
		case 1:
			method, body, want = "POST", "n="+itoa(int64(i)), "POST /items n="+itoa(int64(i))
		case 2:
			method, want = "HEAD", ""
		}
		req := newReq(t, method, front.URL+"/items", strings.NewReader(body))
		req.Header.Set("X-User-Id", "u_1")
		req.Header.Set("X-User-Signature", sign("u_1"))
		resp, err := front.Client().Do(req) // not http.DefaultClient: parallel tests closing httptest servers close its idle conns
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != want {
			t.Fatalf("%s: %d %q, want %q", method, resp.StatusCode, b, want)
		}
	}
	if n, h := up.conns.Load(), up.hits.Load(); n != 1 || h != 10 {
		t.Fatalf("%d upstream connections, %d requests; want 1 and 10", n, h)
	}
}

type failingReader struct{ err error }

func (f failingReader) Read([]byte) (int, error) { return 0, f.err }

// TestUpstreamBadExchanges: a request body that fails to read and a
// response header over the bound end the exchange with an error that says
// so; the connection is not reused and the next request works.
func TestUpstreamBadExchanges(t *testing.T) {
	t.Parallel()
	up := newUpstreamServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big-header" {
			w.Header().Set("X-Big", strings.Repeat("h", 8<<10))
		}
		echo(w, r)
	})
	tr, fb := newTestTransport(t)
	tr.MaxResponseHeaderBytes = 4 << 10

	errBody := errors.New("client went away")
	req := newReq(t, "POST", up.URL+"/upload", io.MultiReader(strings.NewReader("abc"), failingReader{errBody}))
	req.ContentLength = 10
	// (net/http's Request.Write hides the body's error in a type without Unwrap.)
	if resp, err := tr.RoundTrip(req); err == nil || !strings.HasSuffix(err.Error(), "write request: client went away") {
		t.Fatalf("failing body: %v %v", resp, err)
	}
	if resp, err := tr.RoundTrip(newReq(t, "GET", up.URL+"/big-header", nil)); !errors.Is(err, errHeaderTooLarge) {
		t.Fatalf("big header: %v %v", resp, err)
	}
	if got := get(t, tr, up.URL+"/ok"); got != "GET /ok " {
		t.Fatalf("after: %q", got)
	}
	if n, f := up.conns.Load(), fb.n.Load(); n != 3 || f != 0 {
		t.Fatalf("%d connections, fallback used %d times; want 3 and 0", n, f)
	}
}
