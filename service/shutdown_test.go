package service

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// cut is what became of a request held in flight across a stop: outcome
// is "cut" when it got no answer as the docs promise past the shutdown
// timeout (else what it got), at when it ended.
type cut struct {
	listener, outcome string
	at                time.Time
}

// TestStopDrainsListenersTogether: with a request held in flight on each
// of the limiter's three listeners (the API one, the public proxy one and
// gRPC), a stop takes one --shutdown-timeout, not one per listener: the
// listeners drain together. Nothing but the timeout releases the held
// requests, so each is cut then (no answer: the connection closes; the
// gRPC call gets UNAVAILABLE), none before; and a stop that cut requests
// is not a failure (Running.Err nil, exit 0). Before, the listeners
// drained in turn (gRPC, public, API) and the stop took 3 x the timeout.
func TestStopDrainsListenersTogether(t *testing.T) {
	t.Parallel()
	const timeout = 2 * time.Second
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select { // until the proxy gives up on it, or the test ends
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // before the upstream closes
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := Start(ctx, Config{ConfigPath: writePolicy(t, envoyPolicy), Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Upstream: up,
		GRPCListen: "127.0.0.1:0", ShutdownTimeout: timeout, Logger: slog.New(slog.DiscardHandler), Getenv: testGetenv})
	if err != nil {
		t.Fatal(err)
	}
	cuts := make(chan cut, 3)
	holdAPICheck(t, r.APIAddr, cuts)
	holdProxied(t, r.Addr, entered, cuts)
	holdGRPCCall(t, r.GRPCAddr, cuts)

	stopping := time.Now()
	cancel() // SIGTERM
	select {
	case <-r.Done:
	case <-time.After(30 * time.Second):
		t.Fatal("the limiter did not stop within 30 s")
	}
	took := time.Since(stopping)
	for range 3 {
		c := <-cuts
		if c.outcome != "cut" {
			t.Errorf("%s: the held request ended with %s, want it cut", c.listener, c.outcome)
		}
		if held := c.at.Sub(stopping); held < timeout*3/4 {
			t.Errorf("%s: the held request ended %v after the stop began, want it held until the shutdown timeout (%v)", c.listener, held, timeout)
		}
	}
	// The old code took 3 timeouts and more (6 s); one is the bound, the
	// rest is margin for a loaded machine and the publisher's flush.
	if took >= 5*time.Second {
		t.Errorf("the stop took %v with a shutdown timeout of %v: the listeners drained in turn, not together", took, timeout)
	}
	if r.Err != nil {
		t.Errorf("a stop whose drain timed out: %v, want nil (exit 0)", r.Err)
	}
	t.Logf("stop took %v (shutdown timeout %v)", took, timeout)
}

// holdAPICheck holds a /v1/check in flight on the API listener at addr:
// the handler has begun reading its body (the server sent 100 Continue),
// which never arrives whole. Its end goes to cuts.
func holdAPICheck(t *testing.T, addr string, cuts chan<- cut) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(nc, "POST /v1/check HTTP/1.1\r\nHost: tollgate\r\nContent-Type: application/json\r\n"+
		"Content-Length: 100\r\nExpect: 100-continue\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("api: %q %v, want 100 Continue", line, err)
	}
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(nc, `{"endpoint":`); err != nil {
		t.Fatal(err)
	}
	go func() {
		b, err := io.ReadAll(br) // to EOF: the connection closed
		outcome := "cut"
		if len(b) > 0 || err != nil {
			outcome = fmt.Sprintf("%q %v", b, err)
		}
		cuts <- cut{"api", outcome, time.Now()}
	}()
}

// holdProxied holds a proxied request in flight on the public listener at
// addr (the upstream holds it, telling entered). Its end goes to cuts.
func holdProxied(t *testing.T, addr string, entered <-chan struct{}, cuts chan<- cut) {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	go func() {
		resp, err := c.Get("http://" + addr + "/slow")
		outcome := "cut"
		switch {
		case err == nil:
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			outcome = fmt.Sprintf("an answer: %s %q", resp.Status, b)
		case !errors.Is(err, io.EOF): // the connection closed with no answer
			outcome = err.Error()
		}
		cuts <- cut{"public", outcome, time.Now()}
	}()
	<-entered
}

// holdGRPCCall holds a ShouldRateLimit call in flight on the gRPC
// listener at addr: its headers are sent, its message never is, so the
// server's handler waits for it. A call answered after it on the same
// connection shows the server has the held one (it reads a connection's
// frames in order). Its end goes to cuts.
func holdGRPCCall(t *testing.T, addr string, cuts chan<- cut) {
	t.Helper()
	c, conn := rlsClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ShouldRateLimit(ctx, envoyRequest("mobile-api", "GET", "/feed", 1, "user_id", "u_1")); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := st.RecvMsg(new(rlsv3.RateLimitResponse))
		outcome := "cut"
		if status.Code(err) != codes.Unavailable {
			outcome = fmt.Sprintf("%v (want UNAVAILABLE)", err)
		}
		cuts <- cut{"grpc", outcome, time.Now()}
	}()
}

// TestLimiterStopOrder: the limiter's components stop in the order a
// drain needs: readiness turns to draining first, then the listeners (one
// parallel: the API, public and gRPC ones together), and only then the
// event publisher and the store, so a request in flight still decides and
// publishes.
func TestLimiterStopOrder(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, func(http.ResponseWriter, *http.Request) {})
	cfg := Config{ConfigPath: writePolicy(t, envoyPolicy), Listen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Upstream: up,
		GRPCListen: "127.0.0.1:0", PprofListen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler), Getenv: testGetenv}
	cfg.defaults()
	g := &group{log: cfg.Logger}
	_, err := buildLimiter(context.Background(), cfg, g)
	t.Cleanup(g.abort) // releases what was built, even on a failed build
	if err != nil {
		t.Fatal(err)
	}
	stops := slices.Clone(g.names)
	slices.Reverse(stops)
	var at []int
	for _, name := range []string{"readiness", "listeners", "pprof", "events", "store"} {
		at = append(at, slices.Index(stops, name))
	}
	if at[0] != 0 || !slices.IsSorted(at) || slices.Contains(at, -1) {
		t.Fatalf("stop order %v: want readiness first, then listeners, pprof, events and store in that order", stops)
	}
	ls, ok := g.comps[slices.Index(g.names, "listeners")].(*parallel)
	if !ok || !slices.Equal(ls.names, []string{"http", "public http", "grpc"}) {
		t.Fatalf("listeners: %T %v, want a parallel of http, public http, grpc", g.comps[slices.Index(g.names, "listeners")], ls)
	}
}
