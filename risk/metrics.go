package risk

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/signals"
)

// Metrics are riskd's own metrics.
type Metrics struct {
	Events      *prometheus.CounterVec // tollgate_riskd_events_total{type}
	Multipliers prometheus.Counter     // tollgate_riskd_multipliers_written_total
	Locks       prometheus.Counter     // tollgate_riskd_locks_written_total
	Alerts      *prometheus.CounterVec // tollgate_riskd_alerts_total{kind}
	// ShadowAlerts counts the alerts of shadow risk rules, apart from
	// Alerts so dashboards and alert rules on enforcement stay true.
	ShadowAlerts *prometheus.CounterVec // tollgate_riskd_shadow_alerts_total{kind,rule}
	Lag          *prometheus.GaugeVec   // tollgate_riskd_consumer_lag{stream}
	Errors       *prometheus.CounterVec // tollgate_riskd_errors_total{op}
	Offenders    *prometheus.GaugeVec   // tollgate_repeat_offenders{limit}
	// Reports counts reports processed by type, bounded as the
	// limiter's tollgate_reports_total (policy.EventLabel).
	Reports *prometheus.CounterVec // tollgate_riskd_reports_total{type}
	// Actions counts the measures velocity rules took (their alerts:
	// lockout, step_up, tighten, block) by action and rule; shadow rules
	// are in ShadowAlerts.
	Actions *prometheus.CounterVec // tollgate_riskd_velocity_actions_total{action,rule}
	Skipped prometheus.Counter     // tollgate_riskd_redelivered_total
	Leader  prometheus.Gauge       // tollgate_riskd_leader
	// SignalKeys and SignalEvictions are the risk engine's bounded state
	// (signals.Stats), sampled every second: the keys each structure holds
	// (at most Options.MaxKeys each) and those it evicted
	// for room, least recently seen first.
	SignalKeys      *prometheus.GaugeVec   // tollgate_riskd_signal_keys{structure}
	SignalEvictions *prometheus.CounterVec // tollgate_riskd_signal_evictions_total{structure}
}

// NewMetrics creates riskd's metrics and registers them on reg (when not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_riskd_events_total",
			Help: "Events processed by riskd, by type (decision, report)."}, []string{"type"}),
		Multipliers: prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_riskd_multipliers_written_total",
			Help: "Multipliers riskd wrote to the store (re-assertions included)."}),
		Locks: prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_riskd_locks_written_total",
			Help: "Lockouts and step-up requirements riskd wrote or cleared."}),
		Alerts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_riskd_alerts_total",
			Help: "Alerts riskd published, by kind."}, []string{"kind"}),
		ShadowAlerts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_riskd_shadow_alerts_total",
			Help: "Alerts of shadow risk rules (shadow: true), by kind and rule: fired, published with \"shadow\": true, not enforced."}, []string{"kind", "rule"}),
		Lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tollgate_riskd_consumer_lag",
			Help: "Messages in the stream not yet delivered to riskd's durable consumer."}, []string{"stream"}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_riskd_errors_total",
			Help: "riskd failures by operation (store, alert, decode, consume)."}, []string{"op"}),
		Offenders: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tollgate_repeat_offenders",
			Help: "Keys denied more than repeat_offender.per_minute times in the last minute, per limit."}, []string{"limit"}),
		Reports: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_riskd_reports_total",
			Help: "Reports processed by riskd, by type (built-in, a velocity rule's event, or other)."}, []string{"type"}),
		Actions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_riskd_velocity_actions_total",
			Help: "Measures velocity rules took (lockout, step_up, tighten, block), by action and rule."}, []string{"action", "rule"}),
		Skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_riskd_redelivered_total",
			Help: "Messages riskd had already processed and skipped (redeliveries)."}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tollgate_riskd_leader",
			Help: "1 while this riskd holds the leadership lease and consumes, 0 while it stands by."}),
		SignalKeys: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tollgate_riskd_signal_keys",
			Help: "Keys the risk engine tracks, by structure (velocity, anomaly, offenders, measures); each is bounded."}, []string{"structure"}),
		SignalEvictions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_riskd_signal_evictions_total",
			Help: "Keys the risk engine evicted from a full structure (least recently seen first), by structure; measures_in_force counts the locks and multipliers evicted while in force, trusts the trusted-device enrolments in force dropped from riskd's record; neither is re-asserted after Redis lost it."}, []string{"structure"}),
	}
	if reg != nil {
		reg.MustRegister(m.Events, m.Multipliers, m.Locks, m.Alerts, m.ShadowAlerts, m.Lag, m.Errors, m.Offenders, m.Reports, m.Actions, m.Skipped, m.Leader,
			m.SignalKeys, m.SignalEvictions)
	}
	return m
}

// StandBy clears what only a leader measures (lag, offenders) and marks
// this riskd as standing by.
func (m *Metrics) StandBy() {
	m.Leader.Set(0)
	m.Lag.Reset()
	m.Offenders.Reset()
	m.SignalKeys.Reset()
}

// observeSignals sets the key gauges from s and adds to the eviction
// counters what s counts beyond last, which it then updates (a new
// engine's counts start at zero, as last does for a new daemon).
func (m *Metrics) observeSignals(s signals.Stats, last *signals.Evictions) {
	m.SignalKeys.WithLabelValues("velocity").Set(float64(s.Velocity))
	m.SignalKeys.WithLabelValues("anomaly").Set(float64(s.Anomaly))
	m.SignalKeys.WithLabelValues("offenders").Set(float64(s.Offenders))
	m.SignalKeys.WithLabelValues("measures").Set(float64(s.Measures))
	for _, c := range []struct {
		name      string
		now, prev uint64
	}{
		{"velocity", s.Evicted.Velocity, last.Velocity},
		{"anomaly", s.Evicted.Anomaly, last.Anomaly},
		{"offenders", s.Evicted.Offenders, last.Offenders},
		{"measures", s.Evicted.Measures, last.Measures},
		{"measures_in_force", s.Evicted.MeasuresInForce, last.MeasuresInForce},
	} {
		// Add(0) too, so that every structure's series exists from the start
		if c.now >= c.prev {
			m.SignalEvictions.WithLabelValues(c.name).Add(float64(c.now - c.prev))
		}
	}
	*last = s.Evicted
}
