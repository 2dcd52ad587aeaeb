package alerting

import "github.com/prometheus/client_golang/prometheus"

// Delivery results (the result label of tollgate_alert_deliveries_total).
const (
	// ResultDelivered: the sink answered 2xx.
	ResultDelivered = "delivered"
	// ResultRetried: an attempt failed and will be retried.
	ResultRetried = "retried"
	// ResultFailed: the sink was given up after retry_for.
	ResultFailed = "failed"
)

// Metrics are the delivery metrics of contract 7.2.
type Metrics struct {
	// Deliveries counts attempts by sink ("alertmanager", "webhooks[N]")
	// and result (delivered, retried, failed):
	// tollgate_alert_deliveries_total{sink,result}.
	Deliveries *prometheus.CounterVec
	// Pending is the number of alerts taken from the stream and not yet
	// acknowledged (being delivered, retried or folded), summed over the
	// sinks' consumers (an alert two sinks still owe counts twice):
	// tollgate_alert_delivery_pending.
	Pending prometheus.Gauge
}

// NewMetrics creates the metrics and registers them on reg (when not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_alert_deliveries_total",
			Help: "Alert delivery attempts by sink (alertmanager, webhooks[N]) and result (delivered, retried, failed: given up after retry_for)."},
			[]string{"sink", "result"}),
		Pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tollgate_alert_delivery_pending",
			Help: "Alerts taken from the alerts stream and not yet acknowledged (being delivered, retried or folded), summed over the sinks' consumers."}),
	}
	if reg != nil {
		reg.MustRegister(m.Deliveries, m.Pending)
	}
	return m
}
