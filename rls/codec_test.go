package rls

import (
	"bytes"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
)

// encodeSeeds are responses as this package renders them (allowed,
// denied with raw_body, locked, no limit) and edge cases of each field.
func encodeSeeds() []*rlsv3.RateLimitResponse {
	now := time.Unix(1_800_000_000, 0)
	lim := &policy.Limit{Name: "login_per_ip", By: []policy.KeyPart{policy.PartIP}}
	allowed := &engine.Decision{Outcome: engine.Allowed, Binding: lim, Limit: 10, Remaining: 7, Now: now, Reset: now.Add(1500 * time.Millisecond), Window: time.Minute}
	denied := &engine.Decision{Outcome: engine.Limited, Binding: lim, Limit: 10, Now: now, Reset: now.Add(59 * time.Second), RetryAfter: 6 * time.Second, Window: time.Hour}
	locked := &engine.Decision{Outcome: engine.Locked, RetryAfter: 90 * time.Second, Now: now}
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: -3, LimitRemaining: 1<<32 - 1,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Unit: 99, Name: "Ä"},
		DurationUntilReset: &durationpb.Duration{Seconds: -1, Nanos: -5}}
	empty := &rlsv3.RateLimitResponse_DescriptorStatus{CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{}, DurationUntilReset: &durationpb.Duration{}}
	p := getResponse()
	p.okNoLimit(3)
	return []*rlsv3.RateLimitResponse{
		Response(4, "01HZZZZZZZZZZZZZZZZZZZZZZZ", allowed),
		Response(2, "01HZZZZZZZZZZZZZZZZZZZZZZZ", denied),
		Response(1, "01HZZZZZZZZZZZZZZZZZZZZZZZ", locked),
		&p.msg,
		{},
		{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{st, empty, st},
			ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "k"}, {Value: "v"}, {}}, RawBody: bytes.Repeat([]byte("x"), 300)},
	}
}

// TestCodecMarshal: the codec writes what proto.Marshal writes, for small
// answers, for one past gRPC's pooling threshold (a buffer of its pool),
// for a pooled response and for a message without vtprotobuf code.
func TestCodecMarshal(t *testing.T) {
	c := (&Server{}).Codec()
	for i, m := range encodeSeeds() {
		for _, extra := range []int{0, 5000} {
			m.RawBody = append(m.RawBody, bytes.Repeat([]byte("y"), extra)...)
			want, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			data, err := c.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if got := data.Materialize(); !bytes.Equal(got, want) {
				t.Fatalf("seed %d (+%d): got %x\nwant %x", i, extra, got, want)
			}
			data.Free()
		}
	}
	p := getResponse()
	p.okNoLimit(2)
	want, _ := proto.Marshal(&p.msg)
	data, err := c.Marshal(p)
	if err != nil || !bytes.Equal(data.Materialize(), want) {
		t.Fatalf("pooled response: %x %v, want %x", data.Materialize(), err, want)
	}
	h := &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}
	want, _ = proto.Marshal(h)
	if data, err = c.Marshal(h); err != nil || !bytes.Equal(data.Materialize(), want) {
		t.Fatalf("health response: %x %v, want %x", data.Materialize(), err, want)
	}
	var back healthpb.HealthCheckResponse
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(want)}, &back); err != nil || back.Status != h.Status {
		t.Fatalf("health decoded: %v %v", &back, err)
	}
}
