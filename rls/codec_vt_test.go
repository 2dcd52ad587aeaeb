//go:build vtprotobuf

package rls

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestCodecUsesVTProto: built with -tags vtprotobuf (scripts/test, the
// README's build), the rate-limit response has go-control-plane's
// generated vtprotobuf code, so the codec writes it without reflection.
func TestCodecUsesVTProto(t *testing.T) {
	if _, ok := any(&rlsv3.RateLimitResponse{}).(vtMessage); !ok {
		t.Fatal("RateLimitResponse has no vtprotobuf code in this build")
	}
}
