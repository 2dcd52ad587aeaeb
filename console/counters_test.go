package console_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/console"
)

// TestCountersWindow walks the counters through 20 minutes: the summary
// counts the last 15 minutes only, per result, per minute and for the
// most denied limits.
func TestCountersWindow(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	dec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_decisions_total", Help: "decisions"}, []string{"limit", "class", "result"})
	reg.MustRegister(dec)
	c := console.NewCounters(reg)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for m := range 20 {
		now := t0.Add(time.Duration(m) * time.Minute)
		if err := c.Sample(now); err != nil {
			t.Fatal(err)
		}
		dec.WithLabelValues("login-ip", "auth", "allowed").Add(10)
		dec.WithLabelValues("login-ip", "auth", "limited").Add(float64(m))
		dec.WithLabelValues("login-account", "auth", "locked").Add(1)
		dec.WithLabelValues("reads", "read", "shadow_limited").Add(2)
	}
	now := t0.Add(19*time.Minute + 30*time.Second)
	s, err := c.Summary(now)
	if err != nil {
		t.Fatal(err)
	}
	// The oldest sample within 15 min of 10:19:30 is 10:05: minutes 5..19 counted.
	limited := 0
	for m := 5; m < 20; m++ {
		limited += m
	}
	if !s.Since.Equal(t0.Add(5 * time.Minute)) {
		t.Fatalf("since %v", s.Since)
	}
	got := fmt.Sprint(s.Results)
	want := fmt.Sprintf("[{allowed 150} {limited %d} {locked 15} {step_up 0} {unavailable 0} {degraded 0} {shadow_limited 30}]", limited)
	if got != want {
		t.Fatalf("results %s, want %s", got, want)
	}
	if s.Denied != int64(limited+15) || s.Total != int64(150+limited+15+30) {
		t.Fatalf("denied %d total %d", s.Denied, s.Total)
	}
	if got := fmt.Sprint(s.TopDenied); got != fmt.Sprintf("[{login-ip %d} {login-account 15}]", limited) {
		t.Fatalf("top denied %s", got)
	}
	if len(s.Minutes) != 15 || s.Minutes[0].Allowed != 10 || s.Minutes[0].Denied != 6 || s.Minutes[14].Denied != 20 {
		t.Fatalf("minutes %+v", s.Minutes)
	}
}
