// Package deploy holds Tollgate's deployment assets, which are data, not
// code: the Grafana dashboard (grafana/tollgate.json) and the Prometheus
// alerting rules and example scrape configuration (prometheus/). Its tests
// start the limiter in process, scrape /metrics, and check that every
// metric the dashboard and the alerts query is really exported. See
// docs/observability.md.
package deploy
