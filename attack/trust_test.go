package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/risk"
	"github.com/tollgate-dev/tollgate/service"
	"github.com/tollgate-dev/tollgate/streams"
)

// Attacks on the promise of 7.1: an attacker who knows an account name,
// but holds none of its user's devices, can neither lock that user out
// nor spend that user's budget.

// Device tokens of the attacked deployment: every limiter host shares the
// key (risk.attestation.token_key_env); the attacker does not know it.
const (
	deviceKeyEnv = "TOLLGATE_ATTACK_DEVICE_KEY"
	deviceKey    = "device-token-key-of-the-deployment-32+"
)

func init() { os.Setenv(deviceKeyEnv, deviceKey) }

// trustPolicy is the attack policy with the 7.1 settings of the example
// policy: login-account gives trusted devices their own budget, device
// tokens verify on every host.
var trustPolicy = strings.NewReplacer(
	"  - {name: login-account, by: [account, route],  rate: 5/min,   if: {class: auth}}",
	"  - {name: login-account, by: [account, route],  rate: 5/min,   if: {class: auth}, trusted_devices: own}",
	"    verified_multiplier: 2.0\n",
	"    verified_multiplier: 2.0\n    token_key_env: "+deviceKeyEnv+"\n",
).Replace(attackPolicy)

// strictUpstream answers a login as many APIs do: 400 without a password
// (nothing to report, so nothing locks), 401 for a wrong one, 200 for
// "right".
func strictUpstream(t *testing.T) setup {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var login struct{ Username, Password string }
		if err := json.NewDecoder(r.Body).Decode(&login); err != nil || login.Password == "" {
			http.Error(w, "password required", http.StatusBadRequest)
			return
		}
		if login.Password != "right" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, `{"token":"t"}`)
	}))
	t.Cleanup(srv.Close)
	return func(c *service.Config) { c.Upstream = srv.URL }
}

// deviceToken is the token the limiter's attestation endpoint hands a
// device that passed attestation (6.3).
func deviceToken(t *testing.T, device string) string {
	t.Helper()
	tokens, err := attestation.NewTokens([]byte(deviceKey))
	if err != nil {
		t.Fatal(err)
	}
	return tokens.Issue(device, time.Now().Add(time.Hour))
}

// login posts a login for account to the public port from ip, with the
// headers kv (device id and token), and returns the status and the
// envelope's code.
func (tg *target) login(t *testing.T, ip, account, password string, kv ...string) (int, string) {
	t.Helper()
	body := `{"username":"` + account + `"}`
	if password != "" {
		body = `{"username":"` + account + `","password":"` + password + `"}`
	}
	status, b := do(t, "POST", tg.public+"/auth/login", body, from(ip, kv...))
	return status, code(b)
}

// enrol logs the user's phone in with its device token and waits until
// riskd made it a trusted device of the account.
func (tg *target) enrol(t *testing.T, account, device string) {
	t.Helper()
	if status, c := tg.login(t, "198.51.100.10", account, "right", "X-Device-Id", device, "X-Device-Token", deviceToken(t, device)); status != 200 {
		t.Fatalf("the phone's first login: %d %s", status, c)
	}
	eventually(t, 10*time.Second, func() string {
		// the trust set scores each device by its end
		if _, err := tg.rdb.ZScore(context.Background(), bucket.TrustKey(tg.prefix, "account", account), device).Result(); err != nil {
			return fmt.Sprintf("%s not yet a trusted device of %s (%v)", device, account, err)
		}
		return ""
	})
}

// Attack (a): the attacker spends alice's per-account login budget (5/min)
// from addresses of its own, with logins that carry no password (the
// upstream answers 400: nothing is reported, nothing locks, no alert) and
// with wrong passwords: alice's trusted phone is answered 429 too.
// Defence (7.1, trusted_devices: own): the phone draws from a budget of
// its own; the attacker's requests share the account's.
func TestAttackDrainedAccountBudgetKeepsTrustedPhoneOut(t *testing.T) {
	t.Parallel()
	tg := start(t, withPolicy(t, func(string) string { return trustPolicy }), strictUpstream(t))
	tg.enrol(t, "alice", "alice-phone")
	denied := 0
	for i := 0; i < 10; i++ {
		password := ""
		if i%2 == 1 {
			password = fmt.Sprintf("guess-%d", i)
		}
		if status, c := tg.login(t, fmt.Sprintf("203.0.113.%d", 10+i), "alice", password); status == 429 && c == "RATE_LIMITED" {
			denied++
		}
	}
	if denied == 0 {
		t.Fatalf("the attacker's 10 attempts against a 5/min budget were all let through")
	}
	phone := []string{"X-Device-Id", "alice-phone", "X-Device-Token", deviceToken(t, "alice-phone")}
	if status, c := tg.login(t, "198.51.100.10", "alice", "right", phone...); status != 200 {
		t.Fatalf("alice's trusted phone after the attack: %d %s, want 200", status, c)
	}
	// the phone's own budget is bounded like the account's: 5 a minute
	// (its first login above was taken from the shared budget: it was not
	// trusted yet)
	for i := 0; i < 4; i++ {
		tg.login(t, "198.51.100.10", "alice", "right", phone...)
	}
	if status, c := tg.login(t, "198.51.100.10", "alice", "right", phone...); status != 429 || c != "RATE_LIMITED" {
		t.Fatalf("the phone's 6th login within a minute: %d %s, want 429 RATE_LIMITED", status, c)
	}
}

// privateRedis runs the limiter and riskd on a redis-server of the
// test's own, which the test may restart empty; it returns the server.
func privateRedis(t *testing.T) (*testenv.RedisServer, setup) {
	rs := testenv.StartRedis(t)
	return rs, func(c *service.Config) { c.RedisURL = "redis://" + rs.Addr + "/0" }
}

// trustTarget starts the suite's target under trustPolicy in front of a
// strict upstream, on a Redis of its own (rs, to restart it empty; tg.rdb
// is its client), with setups applied after those.
func trustTarget(t *testing.T, setups ...setup) (tg *target, rs *testenv.RedisServer) {
	t.Helper()
	rs, onRedis := privateRedis(t)
	tg = start(t, append([]setup{withPolicy(t, func(string) string { return trustPolicy }), strictUpstream(t), onRedis}, setups...)...)
	tg.rdb = redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { tg.rdb.Close() })
	return tg, rs
}

// Attack (c): alice's account is locked out (exempt_attested) by the
// attacker's failed logins; her trusted phone still gets in. Then Redis
// restarts empty: riskd re-asserts the lockout, but not the trust set, so
// the phone is answered 429 ACCOUNT_LOCKED.
// Defence (7.1): riskd keeps the trusted devices and writes them back
// when the store lost its data, within 15 s.
func TestAttackRedisLossUntrustsPhone(t *testing.T) {
	t.Parallel()
	tg, rs := trustTarget(t)
	tg.enrol(t, "alice", "alice-phone")
	// ten wrong guesses (the shared 5/min budget lets only some through
	// the proxy; the backend reports the rest of the attack's failures)
	for i := 0; i < 10; i++ {
		if status, b := do(t, "POST", tg.api+"/v1/report", `{"type":"login_failed","account":"alice","ip":"203.0.113.9"}`, bearer(apiToken)); status != 202 {
			t.Fatalf("report %d: %d %s", i, status, b)
		}
	}
	locked := func() bool {
		_, b := do(t, "POST", tg.api+"/v1/check", `{"endpoint":"POST /auth/login","ip":"192.0.2.77","account":"alice"}`, bearer(apiToken))
		return code(b) == "ACCOUNT_LOCKED"
	}
	eventually(t, 10*time.Second, func() string {
		if !locked() {
			return "alice not locked out yet"
		}
		return ""
	})
	phone := []string{"X-Device-Id", "alice-phone", "X-Device-Token", deviceToken(t, "alice-phone")}
	if status, c := tg.login(t, "198.51.100.10", "alice", "right", phone...); status != 200 {
		t.Fatalf("the trusted phone during the lockout: %d %s, want 200", status, c)
	}
	tg.syncRisk(t) // riskd is done with the phone's login: its report is not what brings trust back
	rs.Restart(t)
	// riskd re-asserts the lockout; the phone must be trusted again by
	// then (its own budget is whole again: the store is empty)
	lockKey := bucket.LockKey(tg.prefix, "account", "alice")
	eventually(t, 15*time.Second, func() string {
		// in Redis, not only in the limiter's L1 cache
		if n, _ := tg.rdb.Exists(context.Background(), lockKey).Result(); n != 1 || !locked() {
			return "the lockout is not re-asserted yet"
		}
		status, c := tg.login(t, "198.51.100.10", "alice", "right", phone...)
		if status != 200 {
			return fmt.Sprintf("the trusted phone after Redis restarted empty: %d %s", status, c)
		}
		return ""
	})
}

// Attack (b): the attacker floods requests that name alice's attested
// phone's device id without its token (it needs only the id, which the
// app sends in the clear). They feed the anomaly rule, whose penalty
// (x0.05 for 15 minutes) then cuts the phone's own device budget.
// Defence (7.1): claims and proofs are two subjects; the anomaly computed
// from claims binds only claims of the id, and they spend their own bucket.
func TestAttackNamingAttestedDeviceThrottlesIt(t *testing.T) {
	t.Parallel()
	pol := strings.NewReplacer(
		"    verified_multiplier: 2.0\n", "    verified_multiplier: 1.0\n",
		"risk:\n", "risk:\n  anomaly: {by: device, factor: 100, short_window: 10s, long_window: 10m,\n            min_baseline: 0.05/s, multiplier: 0.05, duration: 15m}\n",
	).Replace(trustPolicy)
	tg := start(t, withPolicy(t, func(string) string { return pol }))
	for i := 0; i < 60; i++ {
		do(t, "GET", tg.public+"/feed", "", from(fmt.Sprintf("203.0.113.%d", 10+i%3), "X-Device-Id", "alice-phone"))
	}
	// riskd tightened the claims, and the limiter sees it (past its L1
	// cache of multipliers): a claim of the id now gets x0.05 of 600
	eventually(t, 10*time.Second, func() string {
		_, h, _ := doH(t, "GET", tg.public+"/feed", "", from("203.0.113.50", "X-Device-Id", "alice-phone"))
		if p := h.Get("RateLimit-Policy"); !strings.Contains(p, `"device";q=30;`) {
			return "claims of the phone's id are not tightened yet: " + p
		}
		return ""
	})
	// the phone's normal use: 40 requests (a tenth of what fires the
	// anomaly rule on its own traffic), within its 600/min
	tok := deviceToken(t, "alice-phone")
	for i := 0; i < 40; i++ {
		status, _, b := doH(t, "GET", tg.public+"/feed", "", from("198.51.100.10", "X-Device-Id", "alice-phone", "X-Device-Token", tok))
		if status != 200 {
			t.Fatalf("the phone's request %d after the flood of its claimed id: %d %s", i, status, code(b))
		}
	}
}

// Attack (d): alice's phone was enrolled 3 days ago, so the events stream
// (48 h) no longer holds the login that enrolled it; only Redis does.
// riskd restarts (here it loses its lease to another riskd and takes it
// back: a new daemon, as after a restart or a standby's takeover), the
// attacker locks alice out, then Redis restarts empty: riskd re-asserts
// the lockout, and before, not the phone's trust (a riskd knew only the
// enrolments of the last 48 h), so the phone was answered 429
// ACCOUNT_LOCKED.
// Defence (7.1): a starting riskd also reads the trust sets in force from
// Redis before it is ready (risk scanTrust), and writes them back.
func TestAttackRiskdRestartThenRedisLossUntrustsOldPhone(t *testing.T) {
	t.Parallel()
	tg, rs := trustTarget(t)
	ctx := context.Background()
	store := bucket.NewRedisStore(tg.rdb, bucket.RedisOptions{Timeout: 5 * time.Second, Prefix: tg.prefix})
	t.Cleanup(func() { store.Close() })
	enrolled := time.Now().Add(-72 * time.Hour)
	if err := store.Trust(ctx, bucket.Subject{Kind: "account", ID: "alice"}, "alice-phone", enrolled.Add(risk.DefaultTrustFor)); err != nil {
		t.Fatal(err)
	}
	tg.releadRiskd(t)
	tg.lockOut(t, "alice")
	locked := func() bool { return tg.locked(t, "alice") }
	phone := []string{"X-Device-Id", "alice-phone", "X-Device-Token", deviceToken(t, "alice-phone")}
	if status, c := tg.login(t, "198.51.100.10", "alice", "wrong", phone...); status != 401 {
		t.Fatalf("the phone trusted 3 days ago during the lockout: %d %s, want 401 from the upstream", status, c)
	}
	tg.syncRisk(t)
	rs.Restart(t)
	lockKey := bucket.LockKey(tg.prefix, "account", "alice")
	eventually(t, 15*time.Second, func() string {
		if n, _ := tg.rdb.Exists(ctx, lockKey).Result(); n != 1 || !locked() {
			return "the lockout is not re-asserted yet"
		}
		// a wrong password, so that no login_succeeded enrols the phone
		// anew: the upstream's 401 is the proof the lockout spared it
		if status, c := tg.login(t, "198.51.100.10", "alice", "wrong", phone...); status != 401 {
			return fmt.Sprintf("the phone trusted 3 days ago after riskd restarted and Redis restarted empty: %d %s", status, c)
		}
		return ""
	})
}

// Attack (e): alice's phone was enrolled days ago (the events stream,
// 48 h, no longer holds its login), then riskd and Redis are lost together
// (one host rebooted, a Redis without persistence). The riskd that starts
// finds neither the login nor the trust set, so when the attacker locks
// alice out, her phone is answered 429 ACCOUNT_LOCKED.
// Defence (7.1): riskd journals every enrolment in JetStream
// (<NAME>_TRUST) and reads the journal at start, before it is ready.
func TestAttackRiskdAndRedisLostTogetherUntrustOldPhone(t *testing.T) {
	t.Parallel()
	tg, rs := trustTarget(t)
	ctx := context.Background()
	tg.enrol(t, "alice", "alice-phone")
	js := sharedJetStream(t)
	journal := streams.TrustSubject(tg.riskdConf.SubjectPrefix, "alice", "alice-phone")
	eventually(t, 10*time.Second, func() string {
		st, err := js.Stream(ctx, tg.stream+streams.TrustStream)
		if err != nil {
			return err.Error()
		}
		if _, err := st.GetLastMsgForSubject(ctx, journal); err != nil {
			return "the enrolment is not journaled yet: " + err.Error()
		}
		return ""
	})
	tg.restartRiskd(t, func() {
		// the login ages out of the events stream; Redis comes back empty
		events, err := js.Stream(ctx, tg.stream+streams.EventsStream)
		if err != nil {
			t.Fatal(err)
		}
		if err := events.Purge(ctx); err != nil {
			t.Fatal(err)
		}
		rs.Restart(t)
	})
	tg.lockOut(t, "alice")
	phone := []string{"X-Device-Id", "alice-phone", "X-Device-Token", deviceToken(t, "alice-phone")}
	eventually(t, 15*time.Second, func() string {
		// a wrong password, so that no login_succeeded enrols the phone
		// anew: the upstream's 401 is the proof the lockout spared it
		if status, c := tg.login(t, "198.51.100.10", "alice", "wrong", phone...); status != 401 {
			return fmt.Sprintf("the phone after riskd and Redis were lost together: %d %s", status, c)
		}
		return ""
	})
}

// releadRiskd takes riskd's lease from it (as another riskd would) until
// it stands by, then gives it back and waits until a new daemon leads and
// is ready: riskd rebuilds its state as a riskd that starts.
func (tg *target) releadRiskd(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	leader := bucket.LeaderKey(tg.prefix, service.DefaultDurable)
	eventually(t, 15*time.Second, func() string {
		if err := tg.rdb.Set(ctx, leader, "another-riskd", 0).Err(); err != nil {
			return err.Error()
		}
		if _, body := do(t, "GET", tg.riskd+"/readyz", "", nil); !strings.Contains(body, `"standby"`) {
			return "riskd still leads: " + body
		}
		return ""
	})
	if err := tg.rdb.Del(ctx, leader).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() string {
		if status, body := do(t, "GET", tg.riskd+"/readyz", "", nil); status != 200 || !strings.Contains(body, `"leader"`) || !strings.Contains(body, `"ready"`) {
			return "riskd does not lead again: " + body
		}
		return ""
	})
}
