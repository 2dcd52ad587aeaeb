// Command benchfloor serves constant answers, to measure the floor of
// each transport the limiter can answer through (docs/benchmarks.md,
// "Gateway paths"): POST /v1/check over net/http's HTTP/1.1 server (-http,
// a fixed check body and its headers), Envoy's ShouldRateLimit over
// grpc-go's server with the limiter's former options (-grpc, a fixed
// RateLimitResponse marshalled by grpc-go's codec). Drive it with
// scripts/benchgrpc (-pid this process) one address at a time.
package main

import (
	"context"
	"flag"
	"log"
	"net"
	"net/http"
	_ "net/http/pprof"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/durationpb"
)

// constant is the RLS implementation of the grpc-go server.
type constant struct {
	rlsv3.UnimplementedRateLimitServiceServer
	resp *rlsv3.RateLimitResponse
}

func (c *constant) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return c.resp, nil
}

// answer is an allowed answer to scripts/bench's four descriptors.
func answer() *rlsv3.RateLimitResponse {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: "ip", RequestsPerUnit: 1000, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE},
		LimitRemaining:     999,
		DurationUntilReset: durationpb.New(60 * time.Millisecond)}
	r := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{st, st, st, st}}
	for _, kv := range [][2]string{{"x-ratelimit-limit", "1000"}, {"x-ratelimit-policy", "ip"}, {"x-ratelimit-remaining", "999"}, {"x-ratelimit-reset", "1"}} {
		r.ResponseHeadersToAdd = append(r.ResponseHeadersToAdd, &corev3.HeaderValue{Key: kv[0], Value: kv[1]})
	}
	return r
}

func main() {
	httpAddr := flag.String("http", "127.0.0.1:18080", "net/http's address (POST /v1/check)")
	grpcAddr := flag.String("grpc", "127.0.0.1:18081", "grpc-go's address")
	pprofAddr := flag.String("pprof", "", "net/http/pprof's address (empty: none)")
	flag.Parse()
	if *pprofAddr != "" {
		go func() { log.Fatal(http.ListenAndServe(*pprofAddr, nil)) }() // DefaultServeMux: net/http/pprof's handlers
	}
	resp := answer()
	body := []byte(`{"allowed":true,"limit":"ip","remaining":999,"reset_ms":60}`)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/check", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["Content-Type"] = []string{"application/json"}
		h["X-Ratelimit-Limit"] = []string{"1000"}
		h["X-Ratelimit-Remaining"] = []string{"999"}
		h["X-Ratelimit-Reset"] = []string{"1"}
		_, _ = w.Write(body)
	})
	go func() { log.Fatal(http.ListenAndServe(*httpAddr, mux)) }()

	g := grpc.NewServer(grpc.MaxRecvMsgSize(64<<10), grpc.MaxConcurrentStreams(1024), grpc.NumStreamWorkers(128),
		grpc.InitialWindowSize(1<<20), grpc.InitialConnWindowSize(1<<20),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Minute, Timeout: 20 * time.Second}))
	rlsv3.RegisterRateLimitServiceServer(g, &constant{resp: resp})
	gl, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(g.Serve(gl))
}
