package bucket_test

import (
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
)

// TestDayRate: a bucket refilled per day (N/day) counts like any other,
// in both stores: 100/day refills one token every 864 s.
func TestDayRate(t *testing.T) {
	t.Parallel()
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s, p := sc.new(t)
			req := bucket.Request{Limits: []bucket.Limit{{Key: p + "{account:a}:b:daily", Burst: 100, Rate: 100, Period: 24 * time.Hour}}}
			runSteps(t, s, req, []step{
				{cost: 99, allowed: true, remaining: []float64{1}, reset: []time.Duration{99 * 864 * time.Second}},
				{cost: 1, allowed: true, remaining: []float64{0}, reset: []time.Duration{24 * time.Hour}},
				{cost: 1, allowed: false, remaining: []float64{0}, retry: []time.Duration{864 * time.Second}},
				{at: 864 * time.Second, cost: 1, allowed: true, remaining: []float64{0}},
			})
		})
	}
}
