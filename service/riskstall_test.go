package service

import (
	"bufio"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// metricValue is the value of series (name and labels, exactly as
// exposed) on a daemon's /metrics at addr, and whether it is there.
func metricValue(t *testing.T, addr, series string) (float64, bool) {
	t.Helper()
	_, body := get(t, "http://"+addr+"/metrics")
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %v", series, err)
			}
			return f, true
		}
	}
	return 0, false
}

// TestRedisStallTwoRiskd (7.5): two riskd share a private redis-server
// that is paused (SIGSTOP) for longer than their lease while five
// accounts get ten failed logins each (threshold ten), every report
// answered 202. The leader stops acting (its leader gauge falls to 0)
// while Redis is stalled; after SIGCONT exactly one riskd leads, the five
// accounts are all locked within 10 s of the store answering again, with
// exactly one lockout alert each (an account locked before the pause
// keeps its one alert), and the riskd that stands by processes nothing
// of what follows.
func TestRedisStallTwoRiskd(t *testing.T) {
	t.Parallel()
	rs := testenv.StartRedis(t)
	redisURL := "redis://" + rs.Addr + "/0"
	stream, subj := testenv.SharedStreams(t)
	const prefix = "tg:"
	policyPath := writePolicy(t, strings.Replace(loopPolicy, "threshold: 3", "threshold: 10", 1))
	_, base := start(t, Config{ConfigPath: policyPath, RedisURL: redisURL, NATSURL: testenv.NATSURL(),
		KeyPrefix: prefix, SubjectPrefix: subj, StreamName: stream})
	alerts := watchAlerts(t, testenv.NATSURL(), subj)
	stopA, a := startRiskdFor(t, policyPath, redisURL, prefix, subj, stream, true)
	defer func() { stopA(); <-a.Done }()
	stopB, b := startRiskdFor(t, policyPath, redisURL, prefix, subj, stream, false)
	defer func() { stopB(); <-b.Done }()
	locked := func(accounts ...string) string {
		for _, acct := range accounts {
			if !loginLocked(t, base, acct) {
				return acct + " not locked"
			}
		}
		return ""
	}
	reportFailedLogins(t, base, "before", 10)
	testenv.Eventually(t, 10*time.Second, func() string { return locked("before") })

	rs.Pause(t)
	paused := time.Now()
	var stalled []string
	fail := func(from, to int) {
		for i := from; i < to; i++ {
			acct := fmt.Sprintf("stalled%d", i)
			stalled = append(stalled, acct)
			reportFailedLogins(t, base, acct, 10)
		}
	}
	fail(0, 3)
	testenv.Eventually(t, 10*time.Second, func() string {
		if v, _ := metricValue(t, a.Addr, "tollgate_riskd_leader"); v != 0 {
			return "the leader goes on leading while Redis is stalled"
		}
		return ""
	})
	fail(3, 5)
	// the stall outlasts the lease (1 s) by far
	time.Sleep(time.Until(paused.Add(3 * time.Second)))
	rs.Resume(t)
	// the measures and their alerts, both within 10 s of the store answering
	testenv.Eventually(t, 10*time.Second, func() string {
		if msg := locked(stalled...); msg != "" {
			return msg
		}
		k := alerts.kinds()
		for _, acct := range append(stalled, "before") {
			if k["lockout:"+acct] != 1 {
				return fmt.Sprintf("alerts %s: want exactly one lockout alert per account", toJSON(k))
			}
		}
		return ""
	})
	// exactly one leads; the other processes nothing of what follows
	var leader, standby *Running
	testenv.Eventually(t, 10*time.Second, func() string {
		va, _ := metricValue(t, a.Addr, "tollgate_riskd_leader")
		vb, _ := metricValue(t, b.Addr, "tollgate_riskd_leader")
		switch {
		case va == 1 && vb == 0:
			leader, standby = a, b
		case va == 0 && vb == 1:
			leader, standby = b, a
		default:
			return fmt.Sprintf("leader gauges %v and %v: want exactly one 1", va, vb)
		}
		return ""
	})
	const events = `tollgate_riskd_events_total{type="report"}`
	idle, _ := metricValue(t, standby.Addr, events)
	before, _ := metricValue(t, leader.Addr, events)
	reportFailedLogins(t, base, "after", 10)
	testenv.Eventually(t, 10*time.Second, func() string {
		if v, _ := metricValue(t, leader.Addr, events); v < before+10 {
			return fmt.Sprintf("the leader has processed %v of the 10 reports after the stall", v-before)
		}
		return locked("after")
	})
	if v, _ := metricValue(t, standby.Addr, events); v != idle {
		t.Fatalf("the standby processed %v reports while the other led", v-idle)
	}
	if v, _ := metricValue(t, standby.Addr, "tollgate_riskd_leader"); v != 0 {
		t.Fatal("two riskd lead")
	}
	// what followed moved the pipeline on: no second alert came meanwhile
	if k := alerts.kinds(); k["lockout:after"] != 1 || slices.ContainsFunc(stalled, func(a string) bool { return k["lockout:"+a] != 1 }) {
		t.Fatalf("alerts %s: want exactly one lockout alert per account", toJSON(k))
	}
}

// TestNewLeaderFinishesWhatTheOldLeft (7.5): the leader has taken reports
// from its consumer (delivered, not acknowledged) when Redis stalls, and
// stops before the store answers again; the riskd that stood by leads
// then and acts on all of them at once (not after the consumer's 30 s
// AckWait): the three accounts, ten failed logins each, every report
// answered 202, are locked with one alert each within 10 s of the store
// answering again.
func TestNewLeaderFinishesWhatTheOldLeft(t *testing.T) {
	t.Parallel()
	rs := testenv.StartRedis(t)
	redisURL := "redis://" + rs.Addr + "/0"
	stream, subj := testenv.SharedStreams(t)
	policyPath := writePolicy(t, strings.Replace(loopPolicy, "threshold: 3", "threshold: 10", 1))
	_, base := start(t, Config{ConfigPath: policyPath, RedisURL: redisURL, NATSURL: testenv.NATSURL(),
		KeyPrefix: "tg:", SubjectPrefix: subj, StreamName: stream})
	alerts := watchAlerts(t, testenv.NATSURL(), subj)
	stopA, a := startRiskdFor(t, policyPath, redisURL, "tg:", subj, stream, true)
	defer stopA()
	stopB, b := startRiskdFor(t, policyPath, redisURL, "tg:", subj, stream, false)
	defer func() { stopB(); <-b.Done }()

	rs.Pause(t)
	accounts := []string{"left0", "left1", "left2"}
	for _, acct := range accounts {
		reportFailedLogins(t, base, acct, 10)
	}
	nc, err := nats.Connect(testenv.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() string {
		c, err := js.Consumer(context.Background(), stream+"_EVENTS", "riskd-reports")
		if err != nil {
			return err.Error()
		}
		if info := c.CachedInfo(); info.NumAckPending == 0 {
			return "the leader has not taken the reports from its consumer"
		}
		if v, _ := metricValue(t, a.Addr, "tollgate_riskd_leader"); v != 0 {
			return "the leader goes on leading while Redis is stalled"
		}
		return ""
	})
	stopA()
	select {
	case <-a.Done:
	case <-time.After(15 * time.Second):
		t.Fatal("the old leader did not stop while Redis was stalled")
	}
	rs.Resume(t)
	testenv.Eventually(t, 10*time.Second, func() string {
		for _, acct := range accounts {
			if !loginLocked(t, base, acct) {
				return acct + " not locked: the new leader has not done what the old one left"
			}
		}
		k := alerts.kinds()
		for _, acct := range accounts {
			if k["lockout:"+acct] != 1 {
				return fmt.Sprintf("alerts %s: want exactly one lockout alert per account", toJSON(k))
			}
		}
		return ""
	})
	if v, _ := metricValue(t, b.Addr, "tollgate_riskd_leader"); v != 1 {
		t.Fatal("the riskd that stood by does not lead")
	}
}
