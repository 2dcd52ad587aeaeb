package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/internal/h2grpc"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/rls"
)

// grpcStreamWorkers is how many calls run at once on long-lived
// goroutines; more at a time get a goroutine each.
const grpcStreamWorkers = 128

// healthCheckMethod is the standard health service's unary method (its
// streaming Watch is not served: UNIMPLEMENTED).
const healthCheckMethod = "/grpc.health.v1.Health/Check"

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

// grpcService is the bound Envoy rate-limit service, on internal/h2grpc's
// transport (grpc-go's server transport cost the limiter about 7 µs more
// CPU per call than net/http's: docs/benchmarks.md, "Gateway paths").
type grpcService struct {
	ln     net.Listener
	server *h2grpc.Server
	health *health.Server
	drain  time.Duration
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
	srv, err := h2grpc.New(grpcOptions(rs, hs, log))
	if err != nil {
		return nil, fmt.Errorf("service: grpc: %w", err)
	}
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return nil, fmt.Errorf("service: grpc listen %s: %w", c.Addr, err)
	}
	gs := &grpcService{ln: ln, server: srv, health: hs, drain: c.Drain}
	c.Logger.Info("envoy rate-limit service listening", "addr", gs.addr(), "service", "envoy.service.ratelimit.v3.RateLimitService")
	return gs, nil
}

// grpcOptions are the server's options: the rate-limit service and the
// health check, with the bounds and keepalive grpc-go's server had.
func grpcOptions(rs *rls.Server, hs *health.Server, log *slog.Logger) h2grpc.Options {
	return h2grpc.Options{
		Methods: map[string]h2grpc.Handler{
			rls.FullMethod:    rs.Handle,
			healthCheckMethod: healthCheck(hs),
		},
		MaxRecvMsgSize:       64 << 10, // a RateLimitRequest is small; bound what one call may hold
		MaxConcurrentStreams: 1024,
		Workers:              grpcStreamWorkers,
		KeepaliveMinTime:     5 * time.Second, // Envoy's connection_keepalive may ping this often
		PermitWithoutStream:  true,
		KeepaliveTime:        time.Minute,
		KeepaliveTimeout:     20 * time.Second,
		Logger:               log,
	}
}

// healthCheck serves grpc.health.v1.Health/Check from hs.
func healthCheck(hs *health.Server) h2grpc.Handler {
	return func(ctx context.Context, req, buf []byte) ([]byte, error) {
		var in healthpb.HealthCheckRequest
		if err := proto.Unmarshal(req, &in); err != nil {
			return nil, status.Errorf(codes.Internal, "grpc: error unmarshalling request: %v", err)
		}
		resp, err := hs.Check(ctx, &in)
		if err != nil {
			return nil, err
		}
		return proto.MarshalOptions{}.MarshalAppend(buf, resp)
	}
}

// addr is the bound address.
func (gs *grpcService) addr() string { return gs.ln.Addr().String() }

// Run serves until ctx ends or serving fails, then drains: health turns
// NOT_SERVING, every connection gets GOAWAY, in-flight calls finish (up
// to the drain timeout), then the rest are cut.
func (gs *grpcService) Run(ctx context.Context) error {
	served := make(chan error, 1)
	go func() { served <- gs.server.Serve(gs.ln) }()
	select {
	case err := <-served:
		gs.server.Close()
		return fmt.Errorf("service: grpc: %w", err)
	case <-ctx.Done():
	}
	gs.health.Shutdown()
	dctx, cancel := context.WithTimeout(context.Background(), gs.drain)
	defer cancel()
	_ = gs.server.Shutdown(dctx) // past the drain timeout the calls left are cut
	<-served                     // ErrServerClosed once stopped
	return nil
}
