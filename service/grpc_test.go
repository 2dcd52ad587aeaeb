package service

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
)

// blockingDecider decides once release is closed (or its call's
// context ends), telling started first.
type blockingDecider struct{ started, release chan struct{} }

func (b blockingDecider) Decide(ctx context.Context, _ string, _ *engine.Input, _ *engine.Decision) error {
	b.started <- struct{}{}
	select {
	case <-b.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startGRPC runs the gRPC component alone with d, draining for drain;
// stop cancels it and returns Run's error.
func startGRPC(t *testing.T, d blockingDecider, drain time.Duration) (addr string, stop func() error) {
	t.Helper()
	p, err := policy.Parse("envoy.yaml", []byte(envoyPolicy))
	if err != nil {
		t.Fatal(err)
	}
	gs, err := newGRPC(grpcConfig{Addr: "127.0.0.1:0", Decider: d, Policy: func() *policy.Policy { return p },
		Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler), Drain: drain})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gs.Run(ctx) }()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { _ = stop() })
	return gs.addr(), stop
}

// TestGRPCHealthAndDrain: the health service answers Check (SERVING; an
// unknown service NOT_FOUND; Watch UNIMPLEMENTED); on shutdown the call
// in flight is answered within the drain timeout, and past it cut.
func TestGRPCHealthAndDrain(t *testing.T) {
	t.Parallel()
	d := blockingDecider{started: make(chan struct{}, 1), release: make(chan struct{})}
	addr, stop := startGRPC(t, d, 10*time.Second)
	c, conn := rlsClient(t, addr)
	hc := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	if r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", r, err)
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown service: %v", err)
	}
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("watch: %v", err)
	}

	answered := make(chan error, 1)
	go func() {
		_, err := c.ShouldRateLimit(ctx, envoyRequest("mobile-api", "GET", "/feed", 1, "user_id", "u_1"))
		answered <- err
	}()
	<-d.started
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	eventually(t, 5*time.Second, func() string { // the drain began: the listener is closed
		if nc, err := net.Dial("tcp", addr); err == nil {
			nc.Close()
			return "still accepting"
		}
		return ""
	})
	close(d.release)
	if err := <-answered; err != nil {
		t.Fatalf("call in flight during the drain: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}

	d = blockingDecider{started: make(chan struct{}, 1), release: make(chan struct{})}
	addr, stop = startGRPC(t, d, 50*time.Millisecond)
	c, _ = rlsClient(t, addr)
	go func() {
		_, err := c.ShouldRateLimit(ctx, envoyRequest("mobile-api", "GET", "/feed", 1, "user_id", "u_1"))
		answered <- err
	}()
	<-d.started
	if err := stop(); err != nil {
		t.Fatalf("Run past the drain timeout: %v", err)
	}
	if err := <-answered; status.Code(err) != codes.Unavailable {
		t.Fatalf("call past the drain timeout: %v", err)
	}
}

// TestGRPCCallsBeyondStreamWorkers: with every stream worker busy, a call
// still reaches the decider at once (grpc-go gives it a goroutine of its
// own), so grpcStreamWorkers bounds nothing: twice as many calls as
// workers, over two connections, are all inside the decider together
// before any is answered, and all are answered.
func TestGRPCCallsBeyondStreamWorkers(t *testing.T) {
	t.Parallel()
	const n = 2 * grpcStreamWorkers
	d := blockingDecider{started: make(chan struct{}, n), release: make(chan struct{})}
	addr, _ := startGRPC(t, d, 10*time.Second)
	// the held calls are let go however the test ends, before the server
	// (registered first, so stopped after) drains
	var once sync.Once
	release := func() { once.Do(func() { close(d.release) }) }
	t.Cleanup(release)
	c1, _ := rlsClient(t, addr)
	c2, _ := rlsClient(t, addr)
	answered := make(chan error, n)
	for i := 0; i < n; i++ {
		c := c1
		if i%2 == 1 {
			c = c2
		}
		go func() {
			_, err := c.ShouldRateLimit(context.Background(), envoyRequest("mobile-api", "GET", "/feed", 1, "user_id", "u_1"))
			answered <- err
		}()
	}
	timeout := time.After(30 * time.Second)
	for i := 0; i < n; i++ {
		select {
		case <-d.started:
		case <-timeout:
			t.Fatalf("%d of %d calls reached the decider while the others were held", i, n)
		}
	}
	release()
	for i := 0; i < n; i++ {
		if err := <-answered; err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
}
