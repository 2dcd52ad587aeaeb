package attack

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/service"
	"github.com/tollgate-dev/tollgate/streams"
)

// skewedHost is a second limiter host on the target's NATS whose clock is
// off by skew: its reports carry its own time, as api's handleReport
// stamps them.
type skewedHost struct {
	pub  *streams.Publisher
	skew time.Duration
}

// onSkewedHost returns a setup that records the target's streams and a
// function that starts, once the target runs, a limiter host whose clock
// runs skew ahead (negative: behind).
func onSkewedHost(t *testing.T, skew time.Duration) (setup, func() *skewedHost) {
	t.Helper()
	var cfg streams.Config
	return func(c *service.Config) {
			cfg = streams.Config{Prefix: c.SubjectPrefix, Name: c.StreamName}
		}, func() *skewedHost {
			nc, err := nats.Connect(testenv.NATSURL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			pub, err := streams.NewPublisher(nc, streams.PublisherOptions{Config: cfg})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pub.Close)
			return &skewedHost{pub: pub, skew: skew}
		}
}

// failed reports a failed login on account as the host's API would.
func (h *skewedHost) failed(t *testing.T, account string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r := &streams.Report{V: streams.SchemaVersion, ID: ulid.Make().String(), TS: time.Now().Add(h.skew).UTC(),
		Type: streams.ReportLoginFailed, Source: "api", Account: account}
	if err := h.pub.Report(ctx, r); err != nil {
		t.Fatal(err)
	}
}

// lockedOut reports whether a login on account is answered ACCOUNT_LOCKED.
func (tg *target) lockedOut(t *testing.T, account string) bool {
	t.Helper()
	_, body := do(t, "POST", tg.api+"/v1/check", `{"endpoint":"POST /auth/login","ip":"192.0.2.201","account":"`+account+`"}`, bearer(apiToken))
	return strings.Contains(body, "ACCOUNT_LOCKED")
}

// Attack: one limiter host of the fleet has a clock an hour ahead (NTP
// broken), and one failed login on the victim's account went through it.
// The attacker then guesses the password through the healthy hosts.
// Before: each account's velocity window was evaluated as of the newest
// report's own ts, an hour in the future, so none of the real failures
// fell in it: 30 failures (threshold 10) and no lockout, for the next
// hour. Defence: riskd counts an event no further from its JetStream
// message's time than signals.MaxClockSkew (a minute), so the skewed
// report counts a minute ahead and the 10th failure locks.
func TestAttackFastHostClockBlindsLockout(t *testing.T) {
	t.Parallel()
	capture, host := onSkewedHost(t, time.Hour)
	tg := start(t, capture)
	fast := host()
	const victim = "fast-clock-victim"
	fast.failed(t, victim)
	for i := 0; i < 30; i++ {
		if code, body := do(t, "POST", tg.api+"/v1/report", `{"type":"login_failed","account":"`+victim+`"}`, bearer(apiToken)); code != 202 {
			t.Fatalf("report: %d %s", code, body)
		}
	}
	tg.syncRisk(t)
	if !tg.lockedOut(t, victim) {
		t.Fatal("31 failed logins (threshold 10), one stamped by a host an hour ahead: the account is not locked")
	}
}

// Attack: the limiter host that the victim's login traffic reaches has a
// clock 20 minutes behind. Before: a lockout was set until its 10th
// report's ts + 15m, already past, so Redis dropped it at once (and the
// rule's count started again): the attacker guessed on, ten at a time.
// Defence: riskd counts a report no earlier than signals.MaxClockSkew (a
// minute) before its JetStream message's time, so the lock lasts about
// 14 minutes from now.
func TestAttackSlowHostClockExpiresLockout(t *testing.T) {
	t.Parallel()
	capture, host := onSkewedHost(t, -20*time.Minute)
	tg := start(t, capture)
	slow := host()
	const victim = "slow-clock-victim"
	for i := 0; i < 10; i++ {
		slow.failed(t, victim)
	}
	tg.syncRisk(t)
	if !tg.lockedOut(t, victim) {
		t.Fatal("10 failed logins (threshold 10) through a host 20m behind: the account is not locked")
	}
}

// Attack (on the legitimate user, by a slow NATS): JetStream stores a
// report but its acknowledgement comes after the limiter's report timeout
// (2 s: a replicated stream electing a leader, a slow link), so
// /v1/report answers 503 "retry", and the API backend retries, as the
// docs said to. Before: the retry was a new report (a new id), so each of
// the user's 6 failed logins counted twice and the 10th count locked the
// user out (threshold 10). Defence: a report sent with an
// Idempotency-Key header is published under a message id derived from
// the key, so its retries within the stream's duplicate window (10 min)
// are stored once.
func TestAttackRetriedReportCountsTwice(t *testing.T) {
	t.Parallel()
	proxy := testenv.StartNATSProxy(t, testenv.NATSURL())
	tg := start(t, func(c *service.Config) { c.NATSURL = proxy.URL })
	const victim = "slow-ack-victim"
	retried := 0
	for i := 0; i < 6; i++ {
		h := bearer(apiToken)
		h.Set("Idempotency-Key", fmt.Sprintf("login-%s-%d", victim, i))
		proxy.HoldReplies(2500 * time.Millisecond)
		body := `{"type":"login_failed","account":"` + victim + `"}`
		for attempt := 0; ; attempt++ {
			code, resp := do(t, "POST", tg.api+"/v1/report", body, h)
			if code == 202 {
				break
			}
			if code != 503 || attempt == 5 {
				t.Fatalf("report %d: %d %s", i, code, resp)
			}
			retried++
			time.Sleep(time.Second) // Retry-After: 1
		}
	}
	if retried == 0 {
		t.Fatal("no report was answered 503: the acknowledgements were not held")
	}
	tg.syncRisk(t)
	if tg.lockedOut(t, victim) {
		t.Fatalf("6 failed logins (threshold 10), %d of them retried after a late ack: the user is locked out", retried)
	}
}

// Attack: as TestAttackRedisLossUntrustsPhone, on a Redis Cluster: alice's
// account is locked out (exempt_attested) and her trusted phone still
// gets in; then the one master holding alice's keys restarts empty, the
// others keep theirs. Before: riskd's marker of a store that lost its data
// lived on another master, so riskd never saw the loss; its periodic
// re-assertion put the lockout back but not the trust set, which it writes
// back only on a loss: alice's own phone was answered ACCOUNT_LOCKED.
// Defence: riskd keeps a marker on every master's slots and writes the
// trusted devices back when any of them is gone.
func TestAttackClusterShardLossUntrustsPhone(t *testing.T) {
	t.Parallel()
	cl := testenv.StartCluster(t)
	tg := start(t, withPolicy(t, func(string) string { return trustPolicy }), strictUpstream(t),
		func(c *service.Config) { c.RedisURL = "redis+cluster://" + strings.Join(cl.Addrs, ",") })
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	t.Cleanup(func() { cc.Close() })
	ctx := context.Background()
	// an account whose master is not the one of riskd's marker key
	masterOf := func(key string) *testenv.RedisServer {
		t.Helper()
		slots, err := cc.ClusterSlots(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		s := int(bucket.Slot(key))
		for _, r := range slots {
			if r.Start <= s && s <= r.End {
				for _, n := range cl.Nodes {
					if n.Addr == r.Nodes[0].Addr {
						return n
					}
				}
			}
		}
		t.Fatalf("no master serves %q", key)
		return nil
	}
	marker := masterOf(bucket.StoreEpochKey(tg.prefix, "riskd"))
	account := ""
	for i := 0; account == ""; i++ {
		if a := fmt.Sprint("alice", i); masterOf(bucket.LockKey(tg.prefix, "account", a)) != marker {
			account = a
		}
	}
	phone := []string{"X-Device-Id", "alice-phone", "X-Device-Token", deviceToken(t, "alice-phone")}
	if status, c := tg.login(t, "198.51.100.10", account, "right", phone...); status != 200 {
		t.Fatalf("the phone's first login: %d %s", status, c)
	}
	eventually(t, 10*time.Second, func() string {
		if _, err := cc.ZScore(ctx, bucket.TrustKey(tg.prefix, "account", account), "alice-phone").Result(); err != nil {
			return fmt.Sprintf("the phone is not a trusted device yet (%v)", err)
		}
		return ""
	})
	for i := 0; i < 10; i++ {
		if status, b := do(t, "POST", tg.api+"/v1/report", `{"type":"login_failed","account":"`+account+`","ip":"203.0.113.9"}`, bearer(apiToken)); status != 202 {
			t.Fatalf("report %d: %d %s", i, status, b)
		}
	}
	eventually(t, 10*time.Second, func() string {
		if !tg.lockedOut(t, account) {
			return "not locked out yet"
		}
		return ""
	})
	if status, c := tg.login(t, "198.51.100.10", account, "right", phone...); status != 200 {
		t.Fatalf("the trusted phone during the lockout: %d %s, want 200", status, c)
	}
	tg.syncRisk(t)
	masterOf(bucket.LockKey(tg.prefix, "account", account)).Restart(t)
	lockKey := bucket.LockKey(tg.prefix, "account", account)
	eventually(t, 20*time.Second, func() string {
		if n, _ := cc.Exists(ctx, lockKey).Result(); n != 1 || !tg.lockedOut(t, account) {
			return "the lockout is not re-asserted yet"
		}
		if status, c := tg.login(t, "198.51.100.10", account, "right", phone...); status != 200 {
			return fmt.Sprintf("the trusted phone after its master restarted empty: %d %s", status, c)
		}
		return ""
	})
}

// Attack: as TestAttackRedisLossUntrustsPhone, with alice's phone enrolled
// longer ago than the events stream keeps reports (48 h; a phone is
// trusted for 30 days). Redis restarts empty: riskd loses its lease with
// it and leads again with a new daemon, whose record of trusted devices
// was rebuilt from the events stream alone. Before: the phone was no
// longer in it, riskd re-asserted the lockout and not the phone's trust:
// alice's own phone was answered ACCOUNT_LOCKED. Defence: riskd keeps
// one record of trusted devices for the life of the process, handed from
// each leadership to the next.
func TestAttackRedisLossForgetsOlderTrust(t *testing.T) {
	t.Parallel()
	var cfg streams.Config
	capture := func(c *service.Config) { cfg = streams.Config{Prefix: c.SubjectPrefix, Name: c.StreamName} }
	tg, rs := trustTarget(t, capture)
	tg.enrol(t, "alice", "alice-phone")
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		if status, b := do(t, "POST", tg.api+"/v1/report", `{"type":"login_failed","account":"alice","ip":"203.0.113.9"}`, bearer(apiToken)); status != 202 {
			t.Fatalf("report %d: %d %s", i, status, b)
		}
	}
	eventually(t, 10*time.Second, func() string {
		if !tg.lockedOut(t, "alice") {
			return "alice not locked out yet"
		}
		return ""
	})
	phone := []string{"X-Device-Id", "alice-phone", "X-Device-Token", deviceToken(t, "alice-phone")}
	if status, c := tg.login(t, "198.51.100.10", "alice", "right", phone...); status != 200 {
		t.Fatalf("the trusted phone during the lockout: %d %s, want 200", status, c)
	}
	tg.syncRisk(t)
	// two days on: the phone's logins have left the events stream
	js := sharedJetStream(t)
	st, err := js.Stream(ctx, cfg.Stream(streams.EventsStream))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(cfg.Prefix+"reports."+streams.ReportLoginSucceeded)); err != nil {
		t.Fatal(err)
	}
	rs.Restart(t)
	lockKey := bucket.LockKey(tg.prefix, "account", "alice")
	eventually(t, 20*time.Second, func() string {
		if n, _ := tg.rdb.Exists(ctx, lockKey).Result(); n != 1 || !tg.lockedOut(t, "alice") {
			return "the lockout is not re-asserted yet"
		}
		if status, c := tg.login(t, "198.51.100.10", "alice", "right", phone...); status != 200 {
			return fmt.Sprintf("the trusted phone, enrolled before the events stream's retention, after Redis restarted empty: %d %s", status, c)
		}
		return ""
	})
}
