package service

// Attack tests of issue 10 ("trustworthy signals"), one per attack, each
// against a real limiter (contract 6.3, 6.5, 6.7). They failed before the
// fixes they name.

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
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
	_, body := post(t, base+"/v1/attest/challenge", `{"device_id":"`+device+`"}`)
	var ch struct{ Challenge string }
	if err := json.Unmarshal([]byte(body), &ch); err != nil || ch.Challenge == "" {
		t.Fatalf("challenge: %s", body)
	}
	hash := sha256.Sum256([]byte(ch.Challenge))
	att := ca.Attest(t, attestationtest.Options{AppID: attackAppID, ClientDataHash: hash[:]})
	b64 := base64.StdEncoding.EncodeToString
	resp, body := post(t, base+"/v1/attest/apple", `{"device_id":"`+device+`","key_id":"`+b64(att.KeyID)+`","attestation_object":"`+b64(att.Object)+`","challenge":"`+ch.Challenge+`"}`)
	var v struct {
		DeviceToken string `json:"device_token"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || resp.StatusCode != 200 || v.DeviceToken == "" {
		t.Fatalf("attest %s: %d %s", device, resp.StatusCode, body)
	}
	return v.DeviceToken
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
		"redis":  {ConfigPath: path, RedisURL: "redis://" + testenv.RedisAddr() + "/0", KeyPrefix: keyPrefix},
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
				{"copied id, forged token", "d-victim", token[:len(token)-2] + "AA", "30"},
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

// TestAttackL1KeepsAttestedDeviceExempt (6.3, issue 10 item 2): with
// Redis and the default L1 cache, an attacker failing logins and hitting
// the locked account at full speed never gets the victim's attested,
// trusted device denied (the L1 cache used to answer the cached lock
// without the trust check).
func TestAttackL1KeepsAttestedDeviceExempt(t *testing.T) {
	t.Parallel()
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
	denied := 0
	for i := 0; i < 30; i++ {
		if resp, body := post(t, base+"/v1/check", checkBody("POST /auth/login", "carol", "d-victim", token)); resp.StatusCode != 200 {
			denied++
			t.Logf("victim request %d: %d %s", i, resp.StatusCode, body)
		}
		time.Sleep(30 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if denied > 0 || attacks.Load() < 100 {
		t.Fatalf("victim denied %d of 30 times under %d attacker requests", denied, attacks.Load())
	}
}
