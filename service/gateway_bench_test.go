package service

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// BenchmarkGatewayPaths decides the same requests (scripts/bench's: 4
// limits, keys spread over 10,000 (ip, user, device)) through POST
// /v1/check and through the Envoy rate-limit service of one running
// limiter (memory store, embedded NATS and risk engine), over loopback,
// 16 requests in flight. Run with -count N the two alternate. cpu-us/op
// is the process's CPU time (user + system) per request: limiter and
// client together, since both run in this process.
func BenchmarkGatewayPaths(b *testing.B) {
	r, base := startB(b, Config{ConfigPath: "../testdata/bench-policy.yaml", GRPCListen: "127.0.0.1:0"})
	const pool = 10000
	bodies := make([]string, pool)
	reqs := make([]*rlsv3.RateLimitRequest, pool)
	for i := range bodies {
		ip, user, dev := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), fmt.Sprint("u_", i), fmt.Sprint("d_", i)
		bodies[i] = `{"endpoint":"POST /bench","ip":"` + ip + `","user_id":"` + user + `","device_id":"` + dev + `","cost":1}`
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{
			entry("remote_address", ip), entry("method", "POST", "path", "/bench"), entry("user_id", user), entry("device_id", dev)}}
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	c1, _ := rlsClient(b, r.GRPCAddr)
	c2, _ := rlsClient(b, r.GRPCAddr)
	grpcClients := []rlsv3.RateLimitServiceClient{c1, c2} // Envoy keeps a connection per worker
	paths := []struct {
		name string
		do   func(i int) error
	}{
		{"http", func(i int) error {
			resp, err := hc.Post(base+"/v1/check", "application/json", strings.NewReader(bodies[i]))
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		}},
		{"grpc", func(i int) error {
			resp, err := grpcClients[i&1].ShouldRateLimit(context.Background(), reqs[i])
			if err == nil && resp.OverallCode != rlsv3.RateLimitResponse_OK {
				err = fmt.Errorf("code %v", resp.OverallCode)
			}
			return err
		}},
	}
	for round := 1; round <= 2; round++ { // alternate the paths within one run
		for _, p := range paths {
			benchPath(b, fmt.Sprintf("round=%d/path=%s", round, p.name), p.do)
		}
	}
}

// benchPath runs do from 16 goroutines and reports the CPU per request.
func benchPath(b *testing.B, name string, do func(i int) error) {
	const pool = 10000
	{
		b.Run(name, func(b *testing.B) {
			var n atomic.Int64
			cpu0 := testenv.CPUTime()
			b.SetParallelism(8) // 16 in flight on 2 CPUs
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := do(int(n.Add(7919) % pool)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((testenv.CPUTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}
