package service

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// TestRiskdCountsPolicyReloads: riskd counts its policy reloads in
// tollgate_policy_reloads_total{result} as the limiter does, so that
// TollgatePolicyReloadFailed fires for a riskd that refused a file. riskd
// has refusals of its own (a webhook's secret_env missing from riskd's
// environment while the limiters' has it): before, it exported no such
// series, and a riskd that kept enforcing the old risk rules said so only
// in a log line.
func TestRiskdCountsPolicyReloads(t *testing.T) {
	t.Parallel()
	_, keyPrefix := testenv.Redis(t)
	stream, subj := testenv.SharedStreams(t)
	policyPath := writePolicy(t, loopPolicy)
	redisURL := "redis://" + testenv.RedisAddr() + "/0"
	cancel, rr := startRiskdB(t, policyPath, redisURL, keyPrefix, subj, stream)
	t.Cleanup(func() { cancel(); <-rr.Done })

	metric := func(series string) func() string {
		return func() string {
			if _, body := get(t, "http://"+rr.Addr+"/metrics"); !strings.Contains(body, series) {
				return "riskd's /metrics lacks " + series
			}
			return ""
		}
	}
	// A webhook whose secret riskd's environment does not hold: refused.
	refused := loopPolicy + "alerting:\n  webhooks: [{url: \"http://127.0.0.1:1/hook\", secret_env: TOLLGATE_TEST_UNSET_SECRET_7c1}]\n"
	if err := os.WriteFile(policyPath, []byte(refused), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, metric("tollgate_policy_reloads_total{result=\"error\"} 1"))
	if err := os.WriteFile(policyPath, []byte(loopPolicy+"# changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, metric("tollgate_policy_reloads_total{result=\"ok\"} 1"))
}
