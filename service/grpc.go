package service

import (
	"context"
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

// grpcService is the running Envoy rate-limit service (--grpc-listen).
type grpcService struct {
	addr   string
	server *grpc.Server
	health *health.Server
}

// startGRPC serves Envoy's rate-limit service, deciding through d (the
// check path), and the standard gRPC health service, on cfg.GRPCListen.
// A serve error is sent to serveErr.
func startGRPC(cfg Config, log *slog.Logger, reg prometheus.Registerer, d rls.Decider, pol func() *policy.Policy, serveErr chan<- error) (*grpcService, error) {
	rs, err := rls.New(rls.Options{Decider: d, Policy: pol, Logger: log.With("component", "rls"), Registerer: reg})
	if err != nil {
		return nil, fmt.Errorf("service: grpc: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.GRPCListen)
	if err != nil {
		return nil, fmt.Errorf("service: grpc listen %s: %w", cfg.GRPCListen, err)
	}
	g := grpc.NewServer(
		grpc.ForceServerCodecV2(rs.Codec()),
		grpc.MaxRecvMsgSize(64<<10), // a RateLimitRequest is small; bound what one call may hold
		grpc.MaxConcurrentStreams(1024),
		// Long-lived workers run the calls: a goroutine per call would
		// start with a small stack and grow it on every call (12% of the
		// CPU of a call in a profile).
		grpc.NumStreamWorkers(grpcStreamWorkers),
		// Fixed windows (1 MiB) turn off BDP estimation, whose pings
		// follow the data frames of every busy connection.
		grpc.InitialWindowSize(1<<20),
		grpc.InitialConnWindowSize(1<<20),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}), // Envoy's connection_keepalive may ping this often
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Minute, Timeout: 20 * time.Second}),
	)
	rs.Register(g)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	gs := &grpcService{addr: ln.Addr().String(), server: g, health: hs}
	log.Info("envoy rate-limit service listening", "addr", gs.addr, "service", "envoy.service.ratelimit.v3.RateLimitService")
	go func() {
		if err := g.Serve(ln); err != nil {
			select {
			case serveErr <- fmt.Errorf("grpc: %w", err):
			default: // another server's error is already there
			}
		}
	}()
	return gs, nil
}

// stop drains the gRPC server: health turns NOT_SERVING, in-flight calls
// finish until ctx ends, then the rest are cut.
func (gs *grpcService) stop(ctx context.Context) {
	gs.health.Shutdown()
	done := make(chan struct{})
	go func() {
		gs.server.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		gs.server.Stop()
		<-done
	}
}
