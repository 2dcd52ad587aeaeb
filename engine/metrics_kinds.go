package engine

import "github.com/prometheus/client_golang/prometheus"

// Results of tollgate_lease_releases_total.
const (
	ReleaseReleased = "released"
	ReleaseNotFound = "not_found"
)

// leaseMetrics are the metrics of concurrency limits' leases. Labels are
// bounded: limit names from the policy, results from the constants above;
// never a lease, key or attribute value.
type leaseMetrics struct {
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
		Leases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_leases_acquired_total",
			Help: "Slots of concurrency limits taken by admitted requests, per limit.",
		}, []string{"limit"}),
		Releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_lease_releases_total",
			Help: "Releases of concurrency leases: released (a slot in force freed) or not_found (unknown, already released or expired).",
		}, []string{"result"}),
	}
}

// collectors returns the lease metrics for registration.
func (m *leaseMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Leases, m.Releases}
}

// release counts one release.
func (m *Metrics) release(freed bool) {
	if freed {
		m.Releases.WithLabelValues(ReleaseReleased).Inc()
	} else {
		m.Releases.WithLabelValues(ReleaseNotFound).Inc()
	}
}
