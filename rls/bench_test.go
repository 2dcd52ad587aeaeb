package rls

import (
	"context"
	"testing"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/protobuf/proto"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
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
// allowed answer to four descriptors: protobuf-go's codec against the
// hand-written encoder into gRPC's buffer pool.
func BenchmarkMarshalResponse(b *testing.B) {
	m := encodeSeeds()[0]
	b.Run("proto", func(b *testing.B) {
		c := encoding.GetCodecV2(grpcproto.Name)
		b.ReportAllocs()
		for b.Loop() {
			data, err := c.Marshal(m)
			if err != nil {
				b.Fatal(err)
			}
			data.Free()
		}
	})
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			data, ok := marshalResponse(m)
			if !ok {
				b.Fatal("not encoded")
			}
			data.Free()
		}
	})
}
