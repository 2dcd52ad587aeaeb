package rls

import (
	"bytes"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

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

// TestAppendResponse: the hand-written encoder writes proto.Marshal's
// bytes, and hands what it does not cover to protobuf-go.
func TestAppendResponse(t *testing.T) {
	for i, m := range encodeSeeds() {
		checkAppend(t, m, true)
		if t.Failed() {
			t.Fatalf("seed %d", i)
		}
	}
	h := &corev3.HeaderValue{Key: "a", Value: "b"}
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	for i, m := range []*rlsv3.RateLimitResponse{
		{RequestHeadersToAdd: []*corev3.HeaderValue{h}},
		{DynamicMetadata: &structpb.Struct{}},
		{Quota: &rlsv3.RateLimitResponse_Quota{}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{nil}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{st, {Quota: &rlsv3.RateLimitResponse_Quota{}}}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{UnitMultiplier: wrapperspb.UInt32(2)}}}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: "\xff"}}}},
		{ResponseHeadersToAdd: []*corev3.HeaderValue{h, nil}},
		{ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "a", RawValue: []byte("b")}}},
		{ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "a", Value: "\xc3"}}},
	} {
		if _, ok := appendResponse(nil, m); ok {
			t.Errorf("case %d: encoded %v, want protobuf-go's", i, m)
		}
	}
}

// TestAppendOwnResponse: for the messages this package builds (no
// unknown fields), skipping the unknown-field check writes the same bytes.
func TestAppendOwnResponse(t *testing.T) {
	for i, m := range encodeSeeds() {
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendChecked(nil, m, false)
		if !ok || !bytes.Equal(got, want) {
			t.Fatalf("seed %d: encoded %x (%v), want %x", i, got, ok, want)
		}
	}
}

// TestMarshalResponse: the codec's buffer holds the encoder's bytes,
// also for an answer larger than the size estimate.
func TestMarshalResponse(t *testing.T) {
	for _, m := range encodeSeeds() {
		m.RawBody = append(m.RawBody, bytes.Repeat([]byte("y"), 5000)...)
		want, _ := proto.Marshal(m)
		data, ok := marshalResponse(m, true)
		if !ok {
			t.Fatalf("not encoded: %v", m)
		}
		if got := data.Materialize(); !bytes.Equal(got, want) {
			t.Fatalf("got %x\nwant %x", got, want)
		}
		data.Free()
	}
	if _, ok := marshalResponse(&rlsv3.RateLimitResponse{Quota: &rlsv3.RateLimitResponse_Quota{}}, true); ok {
		t.Fatal("encoded a quota")
	}
}

// checkAppend asserts appendResponse writes proto.Marshal's bytes for m
// (or, unless must, declines).
func checkAppend(t *testing.T, m *rlsv3.RateLimitResponse, must bool) {
	t.Helper()
	got, ok := appendResponse([]byte("prefix"), m)
	if !ok {
		if must {
			t.Errorf("not encoded: %v", m)
		}
		return
	}
	want, err := proto.Marshal(m)
	if err != nil {
		t.Fatalf("encoded %v, which proto.Marshal refuses: %v", m, err)
	}
	if !bytes.Equal(got, append([]byte("prefix"), want...)) {
		t.Fatalf("encoded %x\nproto.Marshal %x\nof %v", got, want, m)
	}
}

// FuzzAppendResponse: for any RateLimitResponse (decoded from the fuzzed
// bytes), appendResponse writes exactly proto.Marshal's bytes or declines.
func FuzzAppendResponse(f *testing.F) {
	for _, m := range encodeSeeds() {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x12, 0x03, 0x12, 0x01, 0x00}) // a status with an unknown field in its limit
	f.Add([]byte{0x1a, 0x02, 0x0a, 0x00})       // an empty header key, written explicitly
	f.Fuzz(func(t *testing.T, data []byte) {
		var m rlsv3.RateLimitResponse
		if proto.Unmarshal(data, &m) != nil {
			return
		}
		checkAppend(t, &m, false)
	})
}
