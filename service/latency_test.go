package service

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// BenchmarkLoopLatency measures the risk loop end to end with the external
// NATS and Redis: from the 202 of the threshold-crossing report to the
// first check the limiter answers 429 ACCOUNT_LOCKED, polling the check
// API back to back. Each iteration locks a new account; p50/p99 are
// reported in milliseconds.
func BenchmarkLoopLatency(b *testing.B) {
	_, keyPrefix := testenv.Redis(b)
	stream, subj := testenv.SharedStreams(b)
	policyPath := writePolicyB(b, loopPolicy)
	redisURL := "redis://" + testenv.RedisAddr() + "/0"
	_, base := startB(b, Config{ConfigPath: policyPath, RedisURL: redisURL, NATSURL: testenv.NATSURL(),
		KeyPrefix: keyPrefix, SubjectPrefix: subj, StreamName: stream})
	stop, rr := startRiskdB(b, policyPath, redisURL, keyPrefix, subj, stream)
	defer func() { stop(); <-rr.Done }()
	client := &http.Client{}
	postB := func(url, body string) int {
		resp, err := client.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		acct := fmt.Sprintf("acct-%d", i)
		report := `{"type":"login_failed","account":"` + acct + `"}`
		check := `{"endpoint":"POST /auth/login","ip":"198.51.100.7","account":"` + acct + `"}`
		postB(base+"/v1/report", report)
		postB(base+"/v1/report", report)
		if code := postB(base+"/v1/report", report); code != 202 {
			b.Fatalf("report: %d", code)
		}
		t0 := time.Now()
		for postB(base+"/v1/check", check) != 429 {
			if time.Since(t0) > 5*time.Second {
				b.Fatal("not locked within 5s")
			}
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, "p99-ms")
}
