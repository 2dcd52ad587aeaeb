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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/rls"
)

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
	// MaxStreams bounds the calls open at once on one connection (more
	// are refused with REFUSED_STREAM); IdleTimeout closes a connection
	// with no call open for that long (7.5). Zero: the defaults.
	MaxStreams  int
	IdleTimeout time.Duration
	// TLS, when set, makes the listener speak TLS (nil: h2c).
	TLS *tlsSource
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

// grpcService is the bound Envoy rate-limit service, on grpc-go's server.
type grpcService struct {
	ln     net.Listener
	server *grpc.Server
	health *health.Server
	drain  time.Duration
	log    *slog.Logger
}

var _ component = (*grpcService)(nil)

// newGRPC validates c, builds the server and binds its address.
func newGRPC(c grpcConfig) (*grpcService, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	log := c.Logger.With("component", "rls")
	rs, err := rls.New(rls.Options{Decider: c.Decider, Policy: c.Policy, Logger: log, Registerer: c.Registerer})
	if err != nil {
		return nil, fmt.Errorf("service: grpc: %w", err)
	}
	hs := health.NewServer()
	srv := grpc.NewServer(grpcOptions(rs, c)...)
	rs.Register(srv)
	healthpb.RegisterHealthServer(srv, checkOnly{hs})
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return nil, fmt.Errorf("service: grpc listen %s: %w", c.Addr, err)
	}
	gs := &grpcService{ln: ln, server: srv, health: hs, drain: c.Drain, log: c.Logger}
	c.Logger.Info("envoy rate-limit service listening", "addr", gs.addr(), "service", "envoy.service.ratelimit.v3.RateLimitService",
		"max_streams", c.MaxStreams, "idle_timeout", c.IdleTimeout.String())
	return gs, nil
}

// grpcOptions are the server's options: the service's codec (pooled
// messages, vtprotobuf code), a small bound on what one call may send,
// the bounds of 7.5 on what one connection may hold, and keepalive as
// Envoy's connection_keepalive needs it.
func grpcOptions(rs *rls.Server, c grpcConfig) []grpc.ServerOption {
	maxStreams, idle := c.MaxStreams, c.IdleTimeout
	if maxStreams <= 0 {
		maxStreams = DefaultGRPCMaxStreams
	}
	if idle <= 0 {
		idle = DefaultGRPCIdleTimeout
	}
	opts := []grpc.ServerOption{
		// vtprotobuf marshalling into pooled buffers: the decision path's
		// allocations (docs/benchmarks.md).
		grpc.ForceServerCodecV2(rs.Codec()),
		// a RateLimitRequest is a few hundred bytes; grpcMaxRecvMsgSize
		// bounds what one call may make the server buffer (grpc-go's
		// default is 4 MiB).
		grpc.MaxRecvMsgSize(grpcMaxRecvMsgSize),
		// and its header list: HPACK repeats a header of the dynamic table
		// for one byte a copy, and grpc-go keeps every copy while the call
		// waits for its message (its default bound, 16 MiB decoded, let 20
		// calls of 7.8 MB sent hold 619 MiB); a call over it is reset.
		grpc.MaxHeaderListSize(grpcMaxHeaderListSize),
		// 7.5: the calls one connection may hold open; more are refused
		// with REFUSED_STREAM (--grpc-max-streams).
		grpc.MaxConcurrentStreams(uint32(maxStreams)),
		// Envoy's connection_keepalive pings, with or without calls in
		// flight; a client pinging faster than grpcKeepaliveMinTime is
		// closed (ENHANCE_YOUR_CALM).
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: grpcKeepaliveMinTime, PermitWithoutStream: true}),
		// 7.5: a connection idle for --grpc-idle-timeout is closed with its
		// memory; a ping after grpcKeepaliveTime of silence finds peers
		// that vanished without a FIN, so their calls are freed. A
		// connection with calls open is never idle to grpc-go, though, and
		// one whose client stops reading but answers pings keeps its stuck
		// calls: so every connection is also recycled (GOAWAY) once it is
		// --grpc-idle-timeout old (grpc-go adds ±10%) and closed
		// grpcAgeGrace later, which frees what a client that stopped
		// reading holds; Envoy opens a new connection on GOAWAY and its
		// calls in flight finish on the old one.
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: idle, Time: grpcKeepaliveTime, Timeout: grpcKeepaliveTimeout,
			MaxConnectionAge: idle, MaxConnectionAgeGrace: min(idle, grpcAgeGrace)}),
		// a connection's write buffer is taken from a pool per write instead
		// of held (32 KiB) by every idle connection.
		grpc.SharedWriteBuffer(true),
		// calls on reused goroutines (docs/benchmarks.md: own CPU per call)
		grpc.NumStreamWorkers(grpcStreamWorkers),
	}
	if c.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(c.TLS.config())))
	}
	return opts
}

// checkOnly is the standard health service without its streaming Watch
// (UNIMPLEMENTED): a watch never ends, so it would hold every drain to
// its timeout, and Envoy's gRPC health checks call Check.
type checkOnly struct{ *health.Server }

func (checkOnly) Watch(*healthpb.HealthCheckRequest, healthpb.Health_WatchServer) error {
	return status.Error(codes.Unimplemented, "unknown method Watch for service grpc.health.v1.Health")
}

// addr is the bound address.
func (gs *grpcService) addr() string { return gs.ln.Addr().String() }

// Run serves until ctx ends or serving fails, then drains: health turns
// NOT_SERVING, every connection gets GOAWAY, in-flight calls finish (up
// to the drain timeout), then the rest are cut (a warning, not an error:
// the stop kept its bound).
func (gs *grpcService) Run(ctx context.Context) error {
	served := make(chan error, 1)
	go func() { served <- gs.server.Serve(gs.ln) }()
	select {
	case err := <-served:
		gs.server.Stop()
		return fmt.Errorf("service: grpc: %w", err)
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
	case <-t.C: // past the drain timeout the calls left are cut
		gs.server.Stop()
		<-stopped
		gs.log.Warn("drain timed out: the calls still in flight were cut", "addr", gs.addr(), "timeout", gs.drain.String())
	}
	<-served
	return nil
}
