package rls

import (
	"context"
	"strings"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/engine"
)

// overBounds are requests of under 64 KiB over the bounds that the
// decoder could otherwise grow sixty-fold in memory (an empty entry or
// descriptor is 2 bytes on the wire, some 80 decoded), with the message
// Map refuses them with.
func overBounds() []struct {
	name    string
	req     *rlsv3.RateLimitRequest
	wantErr string
} {
	entries := &commonv3.RateLimitDescriptor{}
	for range 30000 {
		entries.Entries = append(entries.Entries, &commonv3.RateLimitDescriptor_Entry{})
	}
	var descs []*commonv3.RateLimitDescriptor
	for range 30000 {
		descs = append(descs, &commonv3.RateLimitDescriptor{})
	}
	negative := &commonv3.RateLimitDescriptor{Entries: entries.Entries, IsNegativeHits: true}
	return []struct {
		name    string
		req     *rlsv3.RateLimitRequest
		wantErr string
	}{
		{"entries", &rlsv3.RateLimitRequest{Domain: "mobile-api", Descriptors: []*commonv3.RateLimitDescriptor{desc("user_id", "u_1"), entries}},
			"rls: descriptor 1: more than 64 entries"},
		{"descriptors", &rlsv3.RateLimitRequest{Domain: "mobile-api", Descriptors: descs}, "rls: more than 64 descriptors"},
		{"negative hits entries", &rlsv3.RateLimitRequest{Domain: "mobile-api", Descriptors: []*commonv3.RateLimitDescriptor{negative}},
			"rls: descriptor 0: more than 64 entries"},
	}
}

// TestOverBoundsDecodesSmall: a request over the bounds of one call
// (MaxDescriptors, MaxEntries) is refused without decoding what is over
// them: a hostile client's 64 KiB call of 30,000 empty entries made the
// server allocate about 4 MB (8 clients of 16 calls held over 1 GiB of
// heap). It is refused as before: Map's 400, OVER_LIMIT through gRPC.
// Not parallel: it counts the process's allocations.
func TestOverBoundsDecodesSmall(t *testing.T) {
	e := newEnv(t, nil)
	for _, tt := range overBounds() {
		b, err := proto.Marshal(tt.req)
		if err != nil || len(b) > 64<<10 {
			t.Fatalf("%s: %d bytes, %v", tt.name, len(b), err)
		}
		p := getRequest()
		allocs := testing.AllocsPerRun(5, func() {
			if err := p.unmarshal(b, nil); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > 200 {
			t.Errorf("%s: decoding %d bytes over the bounds made %v allocations", tt.name, len(b), allocs)
		}
		var in engine.Input
		if err := Map(e.rls.o.Policy().Envoy, &p.msg, &in); err == nil || err.Error() != tt.wantErr {
			t.Errorf("%s: Map = %v, want %s", tt.name, err, tt.wantErr)
		}
		putRequest(p)
		resp, err := e.client.ShouldRateLimit(context.Background(), tt.req)
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || len(resp.Statuses) > MaxDescriptors+1 ||
			!strings.Contains(string(resp.RawBody), strings.TrimPrefix(tt.wantErr, "rls: ")) {
			t.Errorf("%s: through gRPC: %v (%d statuses) %v", tt.name, resp.GetOverallCode(), len(resp.GetStatuses()), err)
		}
	}
}
