package rls

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestUnitOf: every period a policy rate can have maps to its Envoy unit,
// N/day included.
func TestUnitOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		period time.Duration
		want   rlsv3.RateLimitResponse_RateLimit_Unit
	}{
		{time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND},
		{time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE},
		{time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR},
		{24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY},
	} {
		if got := unitOf(tc.period); got != tc.want {
			t.Errorf("unitOf(%v) = %v, want %v", tc.period, got, tc.want)
		}
	}
}
