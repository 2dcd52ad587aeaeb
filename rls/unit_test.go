package rls

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestUnitOf: every period a policy rate can have maps to its Envoy unit,
// N/day included, and the periods of calendar quotas (day, week, a
// month of 28 to 31 days).
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
		{7 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_WEEK},
		{28 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_MONTH},
		{31 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_MONTH},
	} {
		if got := unitOf(tc.period); got != tc.want {
			t.Errorf("unitOf(%v) = %v, want %v", tc.period, got, tc.want)
		}
	}
}
