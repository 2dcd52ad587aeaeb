package engine

import "github.com/prometheus/client_golang/prometheus"

// Results of tollgate_lease_releases_total.
const (
	ReleaseReleased = "released"
	ReleaseNotFound = "not_found"
	// ReleaseGivenBack counts the slots the limiter freed itself: taken
	// by a decision whose store call failed (timed out, its caller gone)
	// after it reached the store, so no one had its lease id.
	ReleaseGivenBack = "given_back"
)

// leaseMetrics are the metrics of the limit kinds (bucket, quota,
// concurrency) and of concurrency limits' leases. Labels are bounded:
// limit names from the policy, kinds and results from constants; never a
// lease, key or attribute value.
type leaseMetrics struct {
	// Kinds counts, per applicable limit, what it said by the limit's
	// kind: tollgate_decisions_by_kind_total{kind,result}, so quota and
	// concurrency denials can be watched apart from buckets' without
	// listing limit names.
	Kinds *prometheus.CounterVec
	// Leases counts slots taken, per concurrency limit:
	// tollgate_leases_acquired_total{limit}.
	Leases *prometheus.CounterVec
	// Releases counts releases (POST /v1/release, the proxy, the
	// middleware) by result: tollgate_lease_releases_total{result}.
	Releases *prometheus.CounterVec
}

// newLeaseMetrics creates the lease metrics.
func newLeaseMetrics() leaseMetrics {
	return leaseMetrics{
		Kinds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_decisions_by_kind_total",
			Help: "Decisions per applicable limit by the limit's kind (bucket, quota, concurrency) and what it said (allowed, limited, shadow_limited).",
		}, []string{"kind", "result"}),
		Leases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_leases_acquired_total",
			Help: "Slots of concurrency limits taken by admitted requests, per limit.",
		}, []string{"limit"}),
		Releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_lease_releases_total",
			Help: "Releases of concurrency leases: released (a slot in force freed) or not_found (unknown, already released or expired); given_back: a slot freed by the limiter itself, taken by a decision whose store call failed after it reached the store.",
		}, []string{"result"}),
	}
}

// collectors returns the lease metrics for registration.
func (m *leaseMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Kinds, m.Leases, m.Releases}
}

// release counts one release.
func (m *Metrics) release(freed bool) {
	if freed {
		m.Releases.WithLabelValues(ReleaseReleased).Inc()
	} else {
		m.Releases.WithLabelValues(ReleaseNotFound).Inc()
	}
}
