package engine

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/policy"
)

// Result labels of tollgate_decisions_total.
const (
	ResultAllowed       = "allowed"
	ResultLimited       = "limited"
	ResultLocked        = "locked"
	ResultStepUp        = "step_up"
	ResultUnavailable   = "unavailable"
	ResultDegraded      = "degraded"
	ResultShadowLimited = "shadow_limited"
	// ResultAbandoned counts, per applicable limit, decisions whose caller
	// went away before the store answered (a client that disconnected, its
	// own deadline): no verdict was delivered and none on the store was
	// reached, so they are neither degraded nor unavailable (which alert).
	ResultAbandoned = "abandoned"
	// ResultAllowedList and ResultDeniedList count requests an allow or
	// deny list decided; their limit label is the list's name.
	ResultAllowedList = "allowed_list"
	ResultDeniedList  = "denied_list"
)

// Metrics are the decision metrics of the contract. Labels are bounded:
// limit names come from the policy, classes from its routes, results from
// the constants above; never a user, device or IP.
type Metrics struct {
	// Decisions counts, per applicable limit, what that limit said:
	// tollgate_decisions_total{limit,class,result}.
	Decisions *prometheus.CounterVec
	// Remaining observes remaining/burst of each enforced limit at decision.
	Remaining *prometheus.HistogramVec
	// Seconds observes the time of one decision (store round trip included).
	Seconds prometheus.Histogram
	// StoreErrors counts failed store calls (circuit-open fast fails excluded).
	StoreErrors prometheus.Counter
	// Circuit is the breaker state: 0 closed, 1 open, 2 half-open.
	Circuit prometheus.Gauge
	// L1Hits counts decisions the L1 cache answered without the store.
	L1Hits prometheus.Counter
	leaseMetrics
}

// NewMetrics creates the metrics and registers them on reg (when not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		leaseMetrics: newLeaseMetrics(),
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_decisions_total",
			Help: "Decisions per applicable limit, by what that limit said (allowed, limited, locked, step_up, unavailable, degraded, shadow_limited; allowed_list and denied_list per list).",
		}, []string{"limit", "class", "result"}),
		Remaining: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tollgate_tokens_remaining_ratio",
			Help:    "Remaining tokens over effective burst at decision, per enforced limit; a p99 near 0 means the limit is too tight.",
			Buckets: []float64{0, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1},
		}, []string{"limit"}),
		Seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tollgate_decision_seconds",
			Help:    "Time to reach one decision, store round trip included.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}),
		StoreErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_store_errors_total",
			Help: "Bucket store calls that failed (timeout, connection, script error).",
		}),
		Circuit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_store_circuit_state",
			Help: "Circuit breaker over the bucket store: 0 closed, 1 open, 2 half-open.",
		}),
		L1Hits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_l1_hits_total",
			Help: "Decisions answered by the local L1 cache (known empty bucket or lock) without a store call.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Decisions, m.Remaining, m.Seconds, m.StoreErrors, m.Circuit, m.L1Hits)
		reg.MustRegister(m.leaseMetrics.collectors()...)
	}
	// every result from the start, for alerting on a rate of not_found
	m.Releases.WithLabelValues(ReleaseReleased)
	m.Releases.WithLabelValues(ReleaseNotFound)
	m.Releases.WithLabelValues(ReleaseGivenBack)
	return m
}

// limitObs are one (limit, class)'s metric children, resolved once (nil
// where the limit cannot produce the result: limited or remaining for a
// shadow limit, shadow_limited for an enforced one).
type limitObs struct {
	allowed, limited, shadowLimited prometheus.Counter
	// the same results by the limit's kind (tollgate_decisions_by_kind_total)
	kindAllowed, kindLimited, kindShadow prometheus.Counter
	leased                               prometheus.Counter // concurrency limits only
	remaining                            prometheus.Observer
}

type obsKey struct {
	limit *policy.Limit
	class string
}

// obsCache holds the children of the policy in force, so a decision does
// not hash its labels per limit (a reloaded policy starts a new cache).
type obsCache struct {
	p *policy.Policy
	m sync.Map // obsKey -> *limitObs
}

// limitObs returns l's metric children for class under policy p.
func (e *Engine) limitObs(p *policy.Policy, l *policy.Limit, class string) *limitObs {
	oc := e.obs.Load()
	if oc == nil || oc.p != p {
		oc = &obsCache{p: p}
		e.obs.Store(oc)
	}
	k := obsKey{l, class}
	if v, ok := oc.m.Load(k); ok {
		return v.(*limitObs)
	}
	m := e.o.Metrics
	// only the series this limit can produce: a shadow limit is never
	// limited, an enforced one never shadow_limited
	kind := l.Kind.String()
	o := &limitObs{allowed: m.Decisions.WithLabelValues(l.Name, class, ResultAllowed), kindAllowed: m.Kinds.WithLabelValues(kind, ResultAllowed)}
	if l.Shadow {
		o.shadowLimited = m.Decisions.WithLabelValues(l.Name, class, ResultShadowLimited)
		o.kindShadow = m.Kinds.WithLabelValues(kind, ResultShadowLimited)
	} else {
		o.limited = m.Decisions.WithLabelValues(l.Name, class, ResultLimited)
		o.kindLimited = m.Kinds.WithLabelValues(kind, ResultLimited)
		o.remaining = m.Remaining.WithLabelValues(l.Name)
	}
	if l.Kind == policy.KindConcurrency {
		o.leased = m.Leases.WithLabelValues(l.Name)
	}
	v, _ := oc.m.LoadOrStore(k, o)
	return v.(*limitObs)
}
