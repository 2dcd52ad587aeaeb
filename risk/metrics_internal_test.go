package risk

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/signals"
)

// TestSignalMetrics: the keys each signal structure holds and the keys it
// evicted for room are exported, so that a rotation attack filling the
// bound (and a lockout in force leaving riskd's record) shows.
func TestSignalMetrics(t *testing.T) {
	t.Parallel()
	m := NewMetrics(prometheus.NewRegistry())
	var last signals.Evictions
	m.observeSignals(signals.Stats{Velocity: 7, Measures: 3, Evicted: signals.Evictions{Velocity: 5, Measures: 2, MeasuresInForce: 1}}, &last)
	m.observeSignals(signals.Stats{Velocity: 9, Measures: 3, Evicted: signals.Evictions{Velocity: 8, Measures: 2, MeasuresInForce: 1}}, &last)
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"keys velocity", testutil.ToFloat64(m.SignalKeys.WithLabelValues("velocity")), 9},
		{"keys measures", testutil.ToFloat64(m.SignalKeys.WithLabelValues("measures")), 3},
		{"evictions velocity", testutil.ToFloat64(m.SignalEvictions.WithLabelValues("velocity")), 8},
		{"evictions measures", testutil.ToFloat64(m.SignalEvictions.WithLabelValues("measures")), 2},
		{"evictions measures_in_force", testutil.ToFloat64(m.SignalEvictions.WithLabelValues("measures_in_force")), 1},
		{"evictions anomaly", testutil.ToFloat64(m.SignalEvictions.WithLabelValues("anomaly")), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
}
