package rls

import (
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/api"
	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
)

// quotaPolicy maps Envoy's user_id descriptor to a monthly calendar quota.
const quotaPolicy = `version: 1
limits:
  - {name: sms-month, by: [user], quota: 2/month}
envoy:
  domain: mobile-api
  entries:
    user_id: user
    method: endpoint_method
    path: endpoint_path
`

// TestShouldRateLimitQuota: a descriptor mapped to a calendar quota is
// answered with the quota's count, Envoy's MONTH unit, the remaining
// count and the time to the next month's start (UTC), then OVER_LIMIT.
func TestShouldRateLimitQuota(t *testing.T) {
	t.Parallel()
	p, err := policy.Parse("quota.yaml", []byte(quotaPolicy))
	if err != nil {
		t.Fatal(err)
	}
	pol := func() *policy.Policy { return p }
	reg := prometheus.NewRegistry()
	store := bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return t0 }})
	eng, err := engine.New(engine.Options{Store: store, Policy: pol, Metrics: engine.NewMetrics(reg), Clock: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Options{Engine: eng, Events: &events{}, Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Decider: srv, Policy: pol, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{client: Serve(t, s)}
	// t0 is 2024-04-19T10:30:00Z: the quota resets at 2024-05-01T00:00:00Z
	reset := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC).Sub(t0)
	for i, want := range []struct {
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
	}{{rlsv3.RateLimitResponse_OK, 1}, {rlsv3.RateLimitResponse_OK, 0}, {rlsv3.RateLimitResponse_OVER_LIMIT, 0}} {
		resp := call(t, e, &rlsv3.RateLimitRequest{Domain: "mobile-api", Descriptors: []*commonv3.RateLimitDescriptor{
			desc("method", "POST", "path", "/otp"), desc("user_id", "u_1")}})
		if resp.OverallCode != want.code || len(resp.Statuses) != 2 {
			t.Fatalf("call %d: %v", i, resp)
		}
		for _, st := range resp.Statuses {
			cl := st.GetCurrentLimit()
			if st.Code != want.code || cl.GetName() != "sms-month" || cl.GetRequestsPerUnit() != 2 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MONTH ||
				st.LimitRemaining != want.remaining || st.GetDurationUntilReset().AsDuration() != reset {
				t.Fatalf("call %d: status %v, want %v sms-month 2/MONTH remaining %d reset %v", i, st, want.code, want.remaining, reset)
			}
		}
	}
}
