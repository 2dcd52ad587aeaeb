package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/rls"
)

// grpcStreamWorkers is how many calls run at once on long-lived
// goroutines; more at a time get a goroutine each, as without workers.
const grpcStreamWorkers = 128

// grpcConfig configures the Envoy rate-limit service component
// (--grpc-listen): deciding through Decider (the check path), with the
// policy in force, plus the standard gRPC health service.
type grpcConfig struct {
	Addr       string
	Decider    rls.Decider
	Policy     func() *policy.Policy
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Drain bounds the drain of in-flight calls when ctx ends.
	Drain time.Duration
}

// Validate checks the address and that the parts are there.
func (c grpcConfig) Validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("service: grpc listen address %q: %w", c.Addr, err)
	}
	if c.Decider == nil || c.Policy == nil || c.Registerer == nil || c.Logger == nil {
		return errors.New("service: grpc: decider, policy, registerer and logger are required")
	}
	return nil
}

// grpcService is the bound Envoy rate-limit service.
type grpcService struct {
	ln     net.Listener
	server *grpc.Server
	health *health.Server
	drain  time.Duration
}

var _ component = (*grpcService)(nil)

// newGRPC validates c, builds the server and binds its address.
func newGRPC(c grpcConfig) (*grpcService, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	rs, err := rls.New(rls.Options{Decider: c.Decider, Policy: c.Policy, Logger: c.Logger.With("component", "rls"), Registerer: c.Registerer})
	if err != nil {
		return nil, fmt.Errorf("service: grpc: %w", err)
	}
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return nil, fmt.Errorf("service: grpc listen %s: %w", c.Addr, err)
	}
	g := grpc.NewServer(grpcOptions(rs)...)
	rs.Register(g)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	gs := &grpcService{ln: ln, server: g, health: hs, drain: c.Drain}
	c.Logger.Info("envoy rate-limit service listening", "addr", gs.addr(), "service", "envoy.service.ratelimit.v3.RateLimitService")
	return gs, nil
}

// grpcOptions are the server's options.
func grpcOptions(rs *rls.Server) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(rs.Codec()),
		grpc.MaxRecvMsgSize(64 << 10), // a RateLimitRequest is small; bound what one call may hold
		grpc.MaxConcurrentStreams(1024),
		// Long-lived workers run the calls: a goroutine per call would
		// start with a small stack and grow it on every call (12% of the
		// CPU of a call in a profile).
		grpc.NumStreamWorkers(grpcStreamWorkers),
		// Fixed windows (1 MiB) turn off BDP estimation, whose pings
		// follow the data frames of every busy connection.
		grpc.InitialWindowSize(1 << 20),
		grpc.InitialConnWindowSize(1 << 20),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}), // Envoy's connection_keepalive may ping this often
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Minute, Timeout: 20 * time.Second}),
	}
}

// addr is the bound address.
func (gs *grpcService) addr() string { return gs.ln.Addr().String() }

// Run serves until ctx ends or serving fails, then drains: health turns
// NOT_SERVING, in-flight calls finish (up to the drain timeout), then the
// rest are cut.
func (gs *grpcService) Run(ctx context.Context) error {
	served := make(chan error, 1)
	go func() { served <- gs.server.Serve(gs.ln) }()
	select {
	case err := <-served:
		gs.server.Stop()
		return err
	case <-ctx.Done():
	}
	gs.health.Shutdown()
	stopped := make(chan struct{})
	go func() {
		gs.server.GracefulStop()
		close(stopped)
	}()
	t := time.NewTimer(gs.drain)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		gs.server.Stop()
		<-stopped
	}
	<-served // nil once stopped
	return nil
}
