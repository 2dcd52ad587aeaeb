package replay

import (
	"strconv"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// benchDecisions returns n recorded decisions of mobile traffic: 10,000
// users with their devices, reads, writes and searches, and logins of
// 2,000 accounts, 1 ms apart.
func benchDecisions(n int) []streams.Decision {
	endpoints := []string{"GET /feed", "GET /items/7", "POST /items", "GET /search?q=x", "POST /auth/login"}
	ds := make([]streams.Decision, n)
	t := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	for i := range ds {
		u := strconv.Itoa(i * 7919 % 10000)
		d := streams.Decision{TS: t.Add(time.Duration(i) * time.Millisecond), Endpoint: endpoints[i%len(endpoints)],
			IP: "198.51." + strconv.Itoa(i%200) + "." + strconv.Itoa(i%250), DeviceID: "d_" + u, Cost: 1}
		if i%len(endpoints) == 4 {
			d.Account = "acct_" + strconv.Itoa(i%2000)
		} else {
			d.UserID = "u_" + u
		}
		ds[i] = d
	}
	return ds
}

// candidatePolicy is the example policy with every budget halved.
const candidatePolicy = `version: 1
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "GET /search*",     class: expensive}
  - {match: "GET *",            class: read}
  - {match: "* *",              class: write}
limits:
  - {name: global,        by: [global],          rate: 50000/s}
  - {name: ip-unauth,     by: [ip],              rate: 30/min,  if: {authenticated: false}}
  - {name: ip-auth,       by: [ip],              rate: 300/min, if: {authenticated: true}}
  - {name: user-write,    by: [user],            rate: 30/min,  if: {class: write}}
  - {name: user-read,     by: [user],            rate: 150/min, if: {class: [read, expensive]}}
  - {name: user-search,   by: [user],            rate: 10/min,  if: {class: expensive}}
  - {name: device,        by: [device],          rate: 300/min}
  - {name: login-ip,      by: [ip, route],       rate: 5/min,   if: {class: auth}}
  - {name: login-account, by: [account, route],  rate: 3/min,   if: {class: auth}}
risk:
  velocity:
    - {name: account-failures, event: login_failed, by: account, threshold: 5, window: 10m, action: lockout, duration: 15m}
  anomaly: {by: device, factor: 50, short_window: 10s, long_window: 10m, min_baseline: 0.05/s, multiplier: 0.05, duration: 15m}
  repeat_offender: {per_minute: 100}
`

// BenchmarkReplayer replays recorded decisions under a candidate and the
// built-in example policy (no NATS): the replay's own cost per event.
func BenchmarkReplayer(b *testing.B) {
	cand, err := policy.Parse("candidate.yaml", []byte(candidatePolicy))
	if err != nil {
		b.Fatal(err)
	}
	ds := benchDecisions(200_000)
	r, err := NewReplayer(Policies{Candidate: cand, Baseline: policy.Default()}, Limits{})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	span := time.Duration(len(ds)) * time.Millisecond
	b.ReportAllocs()
	cpu0 := testenv.CPUTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d := ds[i%len(ds)]
		d.TS = d.TS.Add(time.Duration(i/len(ds)) * span)
		r.Decision(&d)
	}
	b.StopTimer()
	b.ReportMetric(float64((testenv.CPUTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/event")
	if rep := r.Result(); rep.Record.Decisions != int64(b.N) {
		b.Fatalf("replayed %d of %d", rep.Record.Decisions, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
