package rls

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgate-dev/tollgate/api"
	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
)

// BenchmarkUnmarshalRequest is what gRPC's codec costs per call to
// decode scripts/bench's four descriptors.
func BenchmarkUnmarshalRequest(b *testing.B) {
	data, _ := proto.Marshal(feed("u_1", 1))
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r rlsv3.RateLimitRequest
			if err := proto.Unmarshal(data, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pooled", func(b *testing.B) {
		e := testEnvoy(b)
		in := newInterner(e.Domain, []string{"remote_address", "method", "path", "user_id"})
		b.ReportAllocs()
		for b.Loop() {
			p := getRequest()
			if err := p.unmarshal(data, in); err != nil {
				b.Fatal(err)
			}
			putRequest(p)
		}
	})
}

// BenchmarkShouldRateLimit is the service's own work per call (mapping,
// the check path on a memory store, the response), without gRPC.
func BenchmarkShouldRateLimit(b *testing.B) {
	e := newEnv(b, nil)
	req := feed("u_1", 1)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.rls.ShouldRateLimit(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMarshalResponse is what the codec costs per call to write an
// allowed answer to four descriptors: gRPC's proto codec (protobuf-go's
// reflection) against the service's (go-control-plane's vtprotobuf code).
func BenchmarkMarshalResponse(b *testing.B) {
	m := encodeSeeds()[0]
	for _, c := range []encoding.CodecV2{encoding.GetCodecV2(grpcproto.Name), (&Server{}).Codec()} {
		name := "proto"
		if _, ok := c.(*codec); ok {
			name = "vtproto"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				data, err := c.Marshal(m)
				if err != nil {
					b.Fatal(err)
				}
				data.Free()
			}
		})
	}
}

// benchPolicy is scripts/bench's policy (testdata/bench-policy.yaml): four
// limits on every call, rates that never bind.
const benchPolicy = `version: 1
routes:
  - {match: "POST /bench", class: write}
limits:
  - {name: ip,     by: [ip],     rate: 100000/s, burst: 100000}
  - {name: user,   by: [user],   rate: 100000/s, burst: 100000}
  - {name: device, by: [device], rate: 100000/s, burst: 100000}
  - {name: route,  by: [route],  rate: 10000000/s}
envoy:
  domain: bench
  entries: {remote_address: ip, method: endpoint_method, path: endpoint_path, user_id: user, device_id: device}
`

// BenchmarkServedCall is what the server does per call between gRPC's
// transport and the store, as gRPC runs it: the codec decodes the wire
// request into a pooled message, the service maps and decides (memory
// store, no events) and renders a pooled answer, the codec writes it and
// gRPC frees the buffer. scripts/bench's descriptors over 1,024 keys.
func BenchmarkServedCall(b *testing.B) {
	p, err := policy.Parse("bench.yaml", []byte(benchPolicy))
	if err != nil {
		b.Fatal(err)
	}
	pol := func() *policy.Policy { return p }
	eng, err := engine.New(engine.Options{Store: bucket.NewMemoryStore(bucket.MemoryOptions{}), Policy: pol,
		Metrics: engine.NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := api.New(api.Options{Engine: eng, Gatherer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(Options{Decider: srv, Policy: pol})
	if err != nil {
		b.Fatal(err)
	}
	wire := make([]mem.BufferSlice, 1024)
	for i := range wire {
		n := strconv.Itoa(i)
		data, err := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{
			desc("remote_address", fmt.Sprintf("10.0.%d.%d", i>>8, i&255)), desc("method", "POST", "path", "/bench"),
			desc("user_id", "u_"+n), desc("device_id", "d_"+n)}})
		if err != nil {
			b.Fatal(err)
		}
		wire[i] = mem.BufferSlice{mem.SliceBuffer(data)}
	}
	c := s.Codec()
	ctx := context.Background()
	b.ReportAllocs()
	var cur mem.BufferSlice
	dec := func(v any) error { return c.Unmarshal(cur, v) }
	i := 0
	for b.Loop() {
		cur = wire[i%len(wire)]
		i++
		resp, err := shouldRateLimitHandler(s, ctx, dec, nil)
		if err != nil {
			b.Fatal(err)
		}
		data, err := c.Marshal(resp)
		if err != nil {
			b.Fatal(err)
		}
		data.Free()
	}
}
