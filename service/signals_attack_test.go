package service

// Attack tests of issue 10 ("trustworthy signals"), one per attack, each
// against a real limiter (contract 6.3, 6.5, 6.7). They failed before the
// fixes they name.

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/attestation/attestationtest"
	"github.com/tollgate-dev/tollgate/internal/testenv"
)

const attackAppID = "TEAMID1234.com.example.app"

// attackPolicy is an attestation policy with an exempt_attested lockout
// after 3 failed logins; root is Apple's root CA file of the test CA.
func attackPolicy(t *testing.T, root string) string {
	return writePolicy(t, `version: 1
routes:
  - {match: "POST /auth/login", class: auth}
limits:
  - {name: device, by: [device], rate: 60/min}
failure_mode: {default: open}
risk:
  velocity:
    - {name: account-failures, event: login_failed, by: account, threshold: 3, window: 10m,
       action: lockout, duration: 15m, exempt_attested: true}
  attestation:
    verified_multiplier: 2.0
    unverified_multiplier: 0.5
    valid_for: 24h
    apple: {app_id: `+attackAppID+`, environment: production, root_ca_file: `+root+`}
`)
}

// testCA returns a test App Attest CA and the path of its root (PEM).
func testCA(t *testing.T) (*attestationtest.CA, string) {
	ca := attestationtest.NewCA(t, time.Now())
	root := filepath.Join(t.TempDir(), "root.pem")
	if err := os.WriteFile(root, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Root.Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return ca, root
}

// attestApple attests device through the limiter at base and returns its device token.
func attestApple(t *testing.T, base string, ca *attestationtest.CA, device string) string {
	t.Helper()
	st, body, _ := attestAppleAs(t, base, ca, device, "")
	token := deviceTokenOf(body)
	if st != 200 || token == "" {
		t.Fatalf("attest %s: %d %s", device, st, body)
	}
	return token
}

// forged is token with one character of its MAC changed: never the token
// itself (its last two characters replaced by "AA" were, for a MAC whose
// last 10 bits are zero: one token in 1,024), never valid.
func forged(token string) string {
	i := len(token) - 10
	c := "A"
	if token[i] == 'A' {
		c = "B"
	}
	return token[:i] + c + token[i+1:]
}

// checkBody is a /v1/check body.
func checkBody(endpoint, account, device, token string) string {
	return `{"endpoint":"` + endpoint + `","ip":"192.0.2.1","account":"` + account + `","device_id":"` + device + `","device_token":"` + token + `"}`
}

// TestAttackCopiedDeviceIDIsUnverified (6.3): an attacker who learnt the
// victim's attested device id, but not its device token, gets the
// unverified multiplier, cannot enrol the id as a trusted device of
// another account, and is not exempt from the victim's account lockout;
// the victim's device, presenting its token, is. Memory store and Redis.
func TestAttackCopiedDeviceIDIsUnverified(t *testing.T) {
	t.Parallel()
	ca, root := testCA(t)
	path := attackPolicy(t, root)
	_, keyPrefix := testenv.Redis(t)
	for name, cfg := range map[string]Config{
		"memory": {ConfigPath: path},
		"redis":  {ConfigPath: path, RedisURL: "redis://" + testenv.RedisAddr() + "/0", KeyPrefix: keyPrefix, StoreTimeout: slowOK},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, base := start(t, cfg)
			token := attestApple(t, base, ca, "d-victim")
			other := attestApple(t, base, ca, "d-other")
			limit := func(device, token string) string {
				resp, _ := post(t, base+"/v1/check", checkBody("GET /", "", device, token))
				return resp.Header.Get("X-RateLimit-Limit")
			}
			for _, c := range []struct{ what, device, token, want string }{
				{"victim with its token", "d-victim", token, "120"},
				{"copied id, no token", "d-victim", "", "30"},
				{"copied id, another device's token", "d-victim", other, "30"},
				{"copied id, forged token", "d-victim", forged(token), "30"},
				{"never attested", "d-new", "", "30"},
			} {
				if got := limit(c.device, c.token); got != c.want {
					t.Errorf("%s: X-RateLimit-Limit %s, want %s", c.what, got, c.want)
				}
			}

			// The victim logs in to alice from its device with the token; the
			// attacker "logs in" to bob with the copied id and no token.
			post(t, base+"/v1/report", `{"type":"login_succeeded","account":"alice","device_id":"d-victim","device_token":"`+token+`"}`)
			post(t, base+"/v1/report", `{"type":"login_succeeded","account":"bob","device_id":"d-victim"}`)
			for i := 0; i < 3; i++ {
				post(t, base+"/v1/report", `{"type":"login_failed","account":"alice"}`)
				post(t, base+"/v1/report", `{"type":"login_failed","account":"bob"}`)
			}
			login := func(account, device, token string) (int, string) {
				resp, body := post(t, base+"/v1/check", checkBody("POST /auth/login", account, device, token))
				return resp.StatusCode, body
			}
			eventually(t, 5*time.Second, func() string {
				if c, _ := login("alice", "d-evil", ""); c != 429 {
					return "alice not locked"
				}
				if c, _ := login("bob", "d-evil", ""); c != 429 {
					return "bob not locked"
				}
				return ""
			})
			if c, body := login("alice", "d-victim", ""); c != 429 || !strings.Contains(body, "ACCOUNT_LOCKED") {
				t.Errorf("copied device id without token got past alice's lockout: %d %s", c, body)
			}
			if c, body := login("alice", "d-victim", token); c != 200 {
				t.Errorf("the victim's attested, trusted device was locked out of alice: %d %s", c, body)
			}
			if c, body := login("bob", "d-victim", token); c != 429 {
				t.Errorf("a bare device id enrolled as a trusted device of bob: %d %s", c, body)
			}
		})
	}
}

// TestAttackReattestedDeviceIDGetsNoToken (6.3, 7.1): an attacker who
// learnt the victim's attested, trusted device id attests it again with
// a genuine device of his own (App Attest with another key): he used to
// be handed a device token of that id, which made him the victim's trusted
// device (exempt from alice's lockout) and evicted the victim's key. Now
// the attestation in force holds the id: 400 ATTESTATION_INVALID, step
// "device", no token; alice stays locked to him and open to the victim.
func TestAttackReattestedDeviceIDGetsNoToken(t *testing.T) {
	t.Parallel()
	ca, root := testCA(t)
	_, base := start(t, Config{ConfigPath: attackPolicy(t, root)})
	token := attestApple(t, base, ca, "d-victim")
	post(t, base+"/v1/report", `{"type":"login_succeeded","account":"alice","device_id":"d-victim","device_token":"`+token+`"}`)
	for i := 0; i < 3; i++ {
		post(t, base+"/v1/report", `{"type":"login_failed","account":"alice"}`)
	}

	_, body := post(t, base+"/v1/attest/challenge", `{"device_id":"d-victim"}`)
	var ch struct{ Challenge string }
	if err := json.Unmarshal([]byte(body), &ch); err != nil || ch.Challenge == "" {
		t.Fatalf("challenge: %s", body)
	}
	hash := sha256.Sum256([]byte(ch.Challenge))
	att := ca.Attest(t, attestationtest.Options{AppID: attackAppID, ClientDataHash: hash[:]})
	b64 := base64.StdEncoding.EncodeToString
	resp, body := post(t, base+"/v1/attest/apple", `{"device_id":"d-victim","key_id":"`+b64(att.KeyID)+`","attestation_object":"`+b64(att.Object)+`","challenge":"`+ch.Challenge+`"}`)
	if resp.StatusCode != 400 || !strings.Contains(body, `"step":"device"`) || strings.Contains(body, `"device_token":`) {
		t.Fatalf("the attacker's attestation of the victim's device id: %d %s", resp.StatusCode, body)
	}
	login := func(device, token string) int {
		resp, _ := post(t, base+"/v1/check", checkBody("POST /auth/login", "alice", device, token))
		return resp.StatusCode
	}
	eventually(t, 5*time.Second, func() string {
		if c := login("d-victim", ""); c != 429 {
			return "alice not locked"
		}
		return ""
	})
	if c := login("d-victim", token); c != 200 {
		t.Errorf("the victim's trusted device was locked out of alice: %d", c)
	}
}

// attestAppleAs attests device with a fresh App Attest key of ca,
// sending extra (`,"device_token":"..."` or "") in the body, and returns
// the answer and the attested key.
func attestAppleAs(t *testing.T, base string, ca *attestationtest.CA, device, extra string) (int, string, *attestationtest.Attested) {
	t.Helper()
	_, body := post(t, base+"/v1/attest/challenge", `{"device_id":"`+device+`"}`)
	var ch struct{ Challenge string }
	if err := json.Unmarshal([]byte(body), &ch); err != nil || ch.Challenge == "" {
		t.Fatalf("challenge: %s", body)
	}
	hash := sha256.Sum256([]byte(ch.Challenge))
	att := ca.Attest(t, attestationtest.Options{AppID: attackAppID, ClientDataHash: hash[:]})
	b64 := base64.StdEncoding.EncodeToString
	resp, body := post(t, base+"/v1/attest/apple", `{"device_id":"`+device+`","key_id":"`+b64(att.KeyID)+`","attestation_object":"`+b64(att.Object)+`","challenge":"`+ch.Challenge+`"`+extra+`}`)
	return resp.StatusCode, body, att
}

// deviceTokenOf returns the device_token of a 200 attestation answer ("" when none).
func deviceTokenOf(body string) string {
	var v struct {
		DeviceToken string `json:"device_token"`
	}
	_ = json.Unmarshal([]byte(body), &v)
	return v.DeviceToken
}

// lapse waits until the attestation that answered token has expired: a
// token expires at its attestation's end rounded down to the second, so a
// second past the token's expiry.
func lapse(t *testing.T, token string) {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token %q: not dt1.<expiry>.<mac>", token)
	}
	var exp int64
	if _, err := fmt.Sscan(parts[1], &exp); err != nil {
		t.Fatalf("token %q: %v", token, err)
	}
	time.Sleep(time.Until(time.Unix(exp+1, 0)))
}

// TestAttackLapsedAttestationTakesOverTrustedDevice (6.3, 7.1): an
// attacker who knows the victim's device id, a trusted device of alice,
// waits until the victim's attestation lapses (the app not opened for
// valid_for) and attests the id with a genuine device of his own. He used
// to be handed a device token of the id, and with it the victim's place
// among alice's trusted devices (exempt from alice's lockout, its own
// budget) for the rest of trusted_for. Now the id stays bound to its last
// attesting key for as long as it may be in a trust set (trusted_for after
// the attestation's end): 400 ATTESTATION_INVALID, step "device", no
// token. The victim comes back with an assertion of the same key, or, on
// a new key (a reinstall that kept its keychain), with its last device
// token even though it expired.
func TestAttackLapsedAttestationTakesOverTrustedDevice(t *testing.T) {
	t.Parallel()
	ca, root := testCA(t)
	pol := attackPolicy(t, root)
	b, err := os.ReadFile(pol)
	if err != nil {
		t.Fatal(err)
	}
	short := strings.Replace(string(b), "valid_for: 24h", "valid_for: 2s", 1)
	if short == string(b) {
		t.Fatal("attackPolicy changed: no valid_for: 24h to shorten")
	}
	if err := os.WriteFile(pol, []byte(short), 0o644); err != nil {
		t.Fatal(err)
	}
	_, base := start(t, Config{ConfigPath: pol})
	st, body, victimKey := attestAppleAs(t, base, ca, "d-victim", "")
	token := deviceTokenOf(body)
	if st != 200 || token == "" {
		t.Fatalf("the victim's attestation: %d %s", st, body)
	}
	post(t, base+"/v1/report", `{"type":"login_succeeded","account":"alice","device_id":"d-victim","device_token":"`+token+`"}`)
	for i := 0; i < 3; i++ {
		post(t, base+"/v1/report", `{"type":"login_failed","account":"alice"}`)
	}
	login := func(token string) int {
		resp, _ := post(t, base+"/v1/check", checkBody("POST /auth/login", "alice", "d-victim", token))
		return resp.StatusCode
	}
	eventually(t, 5*time.Second, func() string {
		if c := login(token); c != 200 {
			return fmt.Sprintf("the victim's trusted device, token valid: %d", c)
		}
		if c := login(""); c != 429 {
			return "alice not locked"
		}
		return ""
	})
	// the victim's attestation lapses (its token with it)
	lapse(t, token)
	if c := login(token); c != 429 {
		t.Fatalf("the victim's lapsed token on alice: %d", c)
	}

	st, body, _ = attestAppleAs(t, base, ca, "d-victim", "")
	if st != 400 || !strings.Contains(body, `"step":"device"`) || deviceTokenOf(body) != "" {
		t.Errorf("the attacker's attestation of the lapsed, trusted device id: %d %s", st, body)
		if tok := deviceTokenOf(body); tok != "" && login(tok) == 200 {
			t.Errorf("with its token the attacker is alice's trusted device, exempt from her lockout")
		}
		return
	}
	if c := login(""); c != 429 {
		t.Errorf("alice open to the attacker: %d", c)
	}

	// the way back: an assertion of the victim's key renews the id
	clientData := []byte("renew after a lapse")
	b64 := base64.StdEncoding.EncodeToString
	asr := attestationtest.Assertion(t, victimKey.Key, attackAppID, 1, clientData)
	resp, body := post(t, base+"/v1/attest/apple/assertion", `{"device_id":"d-victim","key_id":"`+b64(victimKey.KeyID)+`","assertion":"`+b64(asr)+`","client_data":"`+b64(clientData)+`"}`)
	renewed := deviceTokenOf(body)
	if resp.StatusCode != 200 || renewed == "" {
		t.Fatalf("the victim's assertion after the lapse: %d %s", resp.StatusCode, body)
	}
	if c := login(renewed); c != 200 {
		t.Errorf("the victim's renewed token on alice: %d", c)
	}
	// and a new key of the victim, with the last (expired) token, takes it
	lapse(t, renewed)
	st, body, _ = attestAppleAs(t, base, ca, "d-victim", `,"device_token":"`+renewed+`"`)
	if st != 200 || deviceTokenOf(body) == "" {
		t.Fatalf("the victim's new key with its last, expired token: %d %s", st, body)
	}
	if c := login(deviceTokenOf(body)); c != 200 {
		t.Errorf("the victim's new token on alice: %d", c)
	}
	// an older token (expired before the id's last verification) does not
	st, body, _ = attestAppleAs(t, base, ca, "d-victim", `,"device_token":"`+token+`"`)
	if st != 400 || !strings.Contains(body, `"step":"device"`) {
		t.Errorf("a new key with a token older than the id's last verification: %d %s", st, body)
	}
}

// TestAttackL1KeepsAttestedDeviceExempt (6.3, issue 10 item 2): with
// Redis and the default L1 cache, an attacker failing logins and hitting
// the locked account at full speed never gets the victim's attested,
// trusted device denied (the L1 cache used to answer the cached lock
// without the trust check). Not parallel: the attacker saturates the CPU,
// which latency tests running beside it would feel.
func TestAttackL1KeepsAttestedDeviceExempt(t *testing.T) {
	ca, root := testCA(t)
	_, keyPrefix := testenv.Redis(t)
	_, base := start(t, Config{ConfigPath: attackPolicy(t, root), RedisURL: "redis://" + testenv.RedisAddr() + "/0", KeyPrefix: keyPrefix})
	token := attestApple(t, base, ca, "d-victim")
	post(t, base+"/v1/report", `{"type":"login_succeeded","account":"carol","device_id":"d-victim","device_token":"`+token+`"}`)
	for i := 0; i < 3; i++ {
		post(t, base+"/v1/report", `{"type":"login_failed","account":"carol"}`)
	}
	eventually(t, 5*time.Second, func() string {
		if resp, _ := post(t, base+"/v1/check", checkBody("POST /auth/login", "carol", "", "")); resp.StatusCode != 429 {
			return "carol not locked"
		}
		return ""
	})

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var attacks atomic.Int64
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Post(base+"/v1/check", "application/json", strings.NewReader(checkBody("POST /auth/login", "carol", "d-evil", "")))
				if err == nil {
					resp.Body.Close()
					attacks.Add(1)
				}
			}
		}()
	}
	// the victim's checks are spread over the attack by its progress, not
	// by a pause: each waits for 4 more attacker requests answered (so the
	// attacker has hit the cached lock in between), 120 in all at least
	denied := 0
	for i := 0; i < 30; i++ {
		mark := attacks.Load()
		eventually(t, 10*time.Second, func() string {
			if n := attacks.Load() - mark; n < 4 {
				return fmt.Sprintf("victim request %d: %d attacker requests answered since the last, want 4", i, n)
			}
			return ""
		})
		if resp, body := post(t, base+"/v1/check", checkBody("POST /auth/login", "carol", "d-victim", token)); resp.StatusCode != 200 {
			denied++
			t.Logf("victim request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	close(stop)
	wg.Wait()
	if denied > 0 || attacks.Load() < 120 {
		t.Fatalf("victim denied %d of 30 times under %d attacker requests (want 0 under 120 at least)", denied, attacks.Load())
	}
}

// adminDo sends an admin request and returns its status and body.
func adminDo(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// startRiskdReassert starts a riskd on the shared NATS that re-asserts
// its measures every second, and waits until it leads.
func startRiskdReassert(t *testing.T, policyPath, redisURL, keyPrefix, subj, stream string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logger := slog.New(slog.DiscardHandler)
	if os.Getenv("TG_DEBUG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	rr, err := StartRiskd(ctx, RiskdConfig{ConfigPath: policyPath, Listen: "127.0.0.1:0", RedisURL: redisURL, NATSURL: testenv.NATSURL(),
		KeyPrefix: keyPrefix, SubjectPrefix: subj, StreamName: stream, DecisionsMaxBytes: 16 << 20, EventsMaxBytes: 16 << 20, LeaseTTL: time.Second,
		Reassert: time.Second, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-rr.Done })
	eventually(t, 10*time.Second, func() string {
		if _, body := get(t, "http://"+rr.Addr+"/readyz"); !strings.Contains(body, `"status":"ready"`) {
			return "riskd: " + body
		}
		return ""
	})
}

// TestAttackLiftedLockoutStaysLifted (6.5): after DELETE
// /v1/admin/lockouts/dave the account stays unlocked through riskd's
// re-assertions, and the failures before the lift no longer count: two
// new failures (threshold 3) do not lock it, the third does. One-process
// default (riskd re-asserts every 10 s) and split mode on nats-server 2.9
// (riskd re-asserting every second).
func TestAttackLiftedLockoutStaysLifted(t *testing.T) {
	t.Parallel()
	t.Run("one-process", func(t *testing.T) {
		t.Parallel()
		_, base := start(t, Config{ConfigPath: writePolicy(t, loopPolicy), AdminToken: "tok"})
		liftedStaysLifted(t, base, 11*time.Second)
	})
	t.Run("split", func(t *testing.T) {
		t.Parallel()
		_, keyPrefix := testenv.Redis(t)
		stream, subj := testenv.SharedStreams(t)
		path := writePolicy(t, loopPolicy)
		redisURL := "redis://" + testenv.RedisAddr() + "/0"
		_, base := start(t, Config{ConfigPath: path, RedisURL: redisURL, NATSURL: testenv.NATSURL(),
			KeyPrefix: keyPrefix, SubjectPrefix: subj, StreamName: stream, AdminToken: "tok"})
		startRiskdReassert(t, path, redisURL, keyPrefix, subj, stream)
		liftedStaysLifted(t, base, 3*time.Second)
	})
}

// liftedStaysLifted locks dave with 3 failures, lifts the lock, and checks
// for hold that it is not re-asserted, then that only 3 new failures lock.
func liftedStaysLifted(t *testing.T, base string, hold time.Duration) {
	t.Helper()
	fail := func() { t.Helper(); reportFailedLogins(t, base, "dave", 1) }
	locked := func() bool { t.Helper(); return loginLocked(t, base, "dave") }
	for i := 0; i < 3; i++ {
		fail()
	}
	eventually(t, 5*time.Second, func() string {
		if !locked() {
			return "dave not locked after 3 failures"
		}
		return ""
	})
	if code, body := adminDo(t, "DELETE", base+"/v1/admin/lockouts/dave", "tok", ""); code != 200 || !strings.Contains(body, `"cleared":true`) {
		t.Fatalf("lift: %d %s", code, body)
	}
	// not a wait for a condition but the window the property is about: the
	// lift must outlast riskd's re-assertions, which have no signal of their
	// own, so hold covers at least one re-assertion period, checked every
	// 100ms throughout
	for end := time.Now().Add(hold); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if locked() {
			t.Fatal("the lifted lockout came back")
		}
	}
	if _, body := adminDo(t, "GET", base+"/v1/admin/lockouts", "tok", ""); body != "[]\n" {
		t.Fatalf("lockouts listed after the lift: %s", body)
	}
	fail()
	fail()
	// riskd processes reports in order, each one's lock written before the
	// next: once a control account reported after them is locked, riskd
	// has acted on the two failures
	reportFailedLogins(t, base, "control", 3)
	eventually(t, 5*time.Second, func() string {
		if !loginLocked(t, base, "control") {
			return "the control account reported after the failures is not locked"
		}
		return ""
	})
	if locked() {
		t.Fatal("locked again by 2 new failures: the failures before the lift still counted")
	}
	fail()
	eventually(t, 5*time.Second, func() string {
		if !locked() {
			return "not locked after 3 new failures"
		}
		return ""
	})
	if _, body := adminDo(t, "GET", base+"/v1/admin/lockouts", "tok", ""); !strings.Contains(body, `"subject":"account","id":"dave","kind":"lockout","rule":"account-failures"`) {
		t.Fatalf("lockouts: %s", body)
	}
}

// TestAttackRedisRestartKeepsAdminMultiplier (6.5): an admin multiplier
// is back within 15 s after Redis restarts empty, in the one-process
// limiter with Redis and in split mode (riskd on nats-server 2.9).
func TestAttackRedisRestartKeepsAdminMultiplier(t *testing.T) {
	t.Parallel()
	for _, split := range []bool{false, true} {
		name := map[bool]string{false: "one-process", true: "split"}[split]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.StartRedis(t)
			redisURL := "redis://" + srv.Addr + "/0"
			path := writePolicy(t, loopPolicy)
			cfg := Config{ConfigPath: path, RedisURL: redisURL, AdminToken: "tok", StoreTimeout: 100 * time.Millisecond}
			if split {
				stream, subj := testenv.SharedStreams(t)
				cfg.NATSURL, cfg.SubjectPrefix, cfg.StreamName, cfg.KeyPrefix = testenv.NATSURL(), subj, stream, "tg:"
				startRiskdReassert(t, path, redisURL, "tg:", subj, stream)
			}
			_, base := start(t, cfg)
			limit := func() string {
				resp, _ := post(t, base+"/v1/check", `{"endpoint":"PUT /x","ip":"192.0.2.7","user_id":"u1","device_id":"d1"}`)
				return resp.Header.Get("X-RateLimit-Limit")
			}
			if code, body := adminDo(t, "PUT", base+"/v1/admin/multipliers/device/d1", "tok", `{"multiplier":0.1,"ttl":"1h","reason":"abuse"}`); code != 200 {
				t.Fatalf("put: %d %s", code, body)
			}
			if l := limit(); l != "60" { // device 600/min x 0.1
				t.Fatalf("limit with the admin multiplier %s, want 60", l)
			}
			srv.Restart(t) // empty: no persistence
			restarted := time.Now()
			eventually(t, 15*time.Second, func() string {
				if _, body := adminDo(t, "GET", base+"/v1/admin/subjects/device/d1", "tok", ""); !strings.Contains(body, `"source":"admin","value":0.1`) {
					return "admin multiplier not back: " + body
				}
				return ""
			})
			t.Logf("admin multiplier back %v after Redis restarted empty", time.Since(restarted).Round(time.Millisecond))
			eventually(t, 2*time.Second, func() string {
				if l := limit(); l != "60" {
					return "limit " + l + ", want 60"
				}
				return ""
			})
			if _, body := adminDo(t, "GET", base+"/v1/admin/multipliers", "tok", ""); !strings.Contains(body, `"subject":"device","id":"d1","source":"admin","value":0.1`) {
				t.Fatalf("multipliers listing: %s", body)
			}
		})
	}
}

// TestRiskdTellsTheTruth (6.7): a riskd whose Redis is unreachable logs
// an ERROR naming the cause and answers /readyz 503 naming redis and its
// role (standby: it cannot take the lease); with Redis back it leads and
// is ready; with its NATS (nats-server 2.9) killed it is 503 naming nats,
// and ready again once NATS is back.
func TestRiskdTellsTheTruth(t *testing.T) {
	t.Parallel()
	ns := testenv.StartNATS(t)
	rs := testenv.StartRedis(t)
	rs.Stop() // its port, with nothing listening until Restart
	logs := &testenv.SyncBuffer{}
	rr := startRiskdAgainst(t, ns, rs, slog.New(slog.NewJSONHandler(logs, nil)))
	readyz := func() (int, map[string]any) {
		code, body := get(t, "http://"+rr.Addr+"/readyz")
		var v map[string]any
		_ = json.Unmarshal([]byte(body), &v)
		return code, v
	}
	eventually(t, 5*time.Second, func() string {
		code, v := readyz()
		deps, _ := v["dependencies"].(map[string]any)
		if code != 503 || deps["redis"] != "down" || v["role"] != "standby" || !strings.Contains(fmt.Sprint(v["error"]), "redis unreachable") {
			return fmt.Sprintf("readyz %d %v", code, v)
		}
		if !strings.Contains(logs.String(), `"level":"ERROR","msg":"redis unreachable`) {
			return "no ERROR log naming redis: " + logs.String()
		}
		return ""
	})

	rs.Restart(t)
	eventually(t, 10*time.Second, func() string {
		if code, v := readyz(); code != 200 || v["status"] != "ready" || v["role"] != "leader" {
			return fmt.Sprintf("readyz %d %v", code, v)
		}
		return ""
	})

	ns.Stop()
	eventually(t, 5*time.Second, func() string {
		code, v := readyz()
		deps, _ := v["dependencies"].(map[string]any)
		if code != 503 || deps["nats"] != "down" || !strings.Contains(fmt.Sprint(v["error"]), "nats unreachable") {
			return fmt.Sprintf("readyz %d %v", code, v)
		}
		if !strings.Contains(logs.String(), `"level":"ERROR","msg":"nats unreachable`) {
			return "no ERROR log naming nats"
		}
		return ""
	})
	ns.Restart(t)
	eventually(t, 15*time.Second, func() string {
		if code, v := readyz(); code != 200 || v["status"] != "ready" {
			return fmt.Sprintf("readyz %d %v", code, v)
		}
		return ""
	})
}

// TestAttackProxyCopiedDeviceID (6.3): in proxy mode the device token comes
// in identity.device_token_header (default X-Device-Token); a copied
// X-Device-Id without it is unverified.
func TestAttackProxyCopiedDeviceID(t *testing.T) {
	t.Parallel()
	ca, root := testCA(t)
	path := writePolicy(t, `version: 1
identity: {device_header: X-Device-Id}
limits:
  - {name: device, by: [device], rate: 60/min}
risk:
  attestation:
    verified_multiplier: 2.0
    unverified_multiplier: 0.5
    apple: {app_id: `+attackAppID+`, environment: production, root_ca_file: `+root+`}
`)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	_, base := start(t, Config{ConfigPath: path, Upstream: up})
	token := attestApple(t, base, ca, "d-victim")
	limit := func(device, token string) string {
		req, _ := http.NewRequest("GET", base+"/feed", nil)
		req.Header.Set("X-Device-Id", device)
		if token != "" {
			req.Header.Set("X-Device-Token", token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get("X-RateLimit-Limit")
	}
	if l := limit("d-victim", token); l != "120" {
		t.Errorf("with its token: limit %s, want 120", l)
	}
	if l := limit("d-victim", ""); l != "30" {
		t.Errorf("copied X-Device-Id without a token: limit %s, want 30", l)
	}
	if l := limit("d-victim", "dt1.1.AAAA"); l != "30" {
		t.Errorf("copied X-Device-Id with a forged token: limit %s, want 30", l)
	}
}

// TestSubjectViewComputed (6.5): the subject view lists the multipliers
// the limiter computes (reputation of ip and asn subjects) with their
// source, and counts them in "effective".
func TestSubjectViewComputed(t *testing.T) {
	t.Parallel()
	_, base := start(t, Config{AdminToken: "tok"}) // the built-in example policy
	for _, c := range []struct{ path, want string }{
		{"ip/203.0.113.5", `"effective":0.1,"multipliers":[{"source":"reputation","value":0.1,"expires_at":null,"reason":"vpn-farm"}]`},
		{"asn/16509", `"effective":0.25,"multipliers":[{"source":"reputation","value":0.25,"expires_at":null,"reason":"datacenter"}]`},
		{"ip/198.51.100.7", `"effective":1,"multipliers":[]`},
		{"device/d1", `"effective":0.5,"multipliers":[{"source":"unverified","value":0.5`},
	} {
		if code, body := adminDo(t, "GET", base+"/v1/admin/subjects/"+c.path, "tok", ""); code != 200 || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s, want %s", c.path, code, body, c.want)
		}
	}
	if code, body := adminDo(t, "PUT", base+"/v1/admin/multipliers/ip/203.0.113.5", "tok", `{"multiplier":2}`); code != 200 ||
		!strings.Contains(body, `"effective":0.1,"multipliers":[{"source":"admin","value":2,"expires_at":null,"reason":""},{"source":"reputation"`) {
		t.Errorf("admin bonus on a penalised ip: %d %s", code, body)
	}
	if code, body := adminDo(t, "GET", base+"/v1/admin/multipliers?limit=0", "tok", ""); code != 400 || !strings.Contains(body, `\"limit\"`) {
		t.Errorf("limit=0: %d %s", code, body)
	}
}

// startRiskdAgainst runs riskd on its own NATS and Redis servers (which a
// test may stop, pause or restart) until the test ends.
func startRiskdAgainst(t *testing.T, ns *testenv.NATSServer, rs *testenv.RedisServer, log *slog.Logger) *Running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rr, err := StartRiskd(ctx, RiskdConfig{Listen: "127.0.0.1:0", RedisURL: "redis://" + rs.Addr + "/0", NATSURL: ns.URL,
		DecisionsMaxBytes: 16 << 20, EventsMaxBytes: 16 << 20, LeaseTTL: time.Second, Logger: log})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-rr.Done })
	return rr
}
