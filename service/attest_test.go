package service

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/attestation/attestationtest"
)

// TestAttestationEndToEnd: an attested device gets more room, an
// unattested one less; the admin view shows the attestation; and with
// exempt_attested, failed logins from elsewhere do not lock the real
// user's attested device out of the account.
func TestAttestationEndToEnd(t *testing.T) {
	t.Parallel()
	ca := attestationtest.NewCA(t, time.Now())
	dir := t.TempDir()
	root := filepath.Join(dir, "root.pem")
	if err := os.WriteFile(root, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Root.Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	const appID = "TEAMID1234.com.example.app"
	path := writePolicy(t, `version: 1
routes:
  - {match: "POST /auth/login", class: auth}
limits:
  - {name: device, by: [device], rate: 60/min}
risk:
  velocity:
    - {name: account-failures, event: login_failed, by: account, threshold: 3, window: 10m,
       action: lockout, duration: 15m, exempt_attested: true}
  attestation:
    verified_multiplier: 2.0
    unverified_multiplier: 0.5
    valid_for: 24h
    apple: {app_id: `+appID+`, environment: production, root_ca_file: `+root+`}
`)
	_, base := start(t, Config{ConfigPath: path, AdminToken: "tok"})

	// challenge, then App Attest for d-good
	_, body := post(t, base+"/v1/attest/challenge", `{"device_id":"d-good"}`)
	var ch struct{ Challenge string }
	if err := json.Unmarshal([]byte(body), &ch); err != nil || ch.Challenge == "" {
		t.Fatalf("challenge: %s", body)
	}
	hash := sha256.Sum256([]byte(ch.Challenge))
	att := ca.Attest(t, attestationtest.Options{AppID: appID, ClientDataHash: hash[:]})
	b64 := base64.StdEncoding.EncodeToString
	resp, body := post(t, base+"/v1/attest/apple", `{"device_id":"d-good","key_id":"`+b64(att.KeyID)+`","attestation_object":"`+b64(att.Object)+`","challenge":"`+ch.Challenge+`"}`)
	var verified struct {
		DeviceToken string `json:"device_token"`
	}
	_ = json.Unmarshal([]byte(body), &verified)
	if resp.StatusCode != 200 || !strings.Contains(body, `"status":"verified"`) || verified.DeviceToken == "" {
		t.Fatalf("attest: %d %s", resp.StatusCode, body)
	}
	token := verified.DeviceToken
	limit := func(device, token string) string {
		resp, _ := post(t, base+"/v1/check", `{"endpoint":"GET /","ip":"192.0.2.1","device_id":"`+device+`","device_token":"`+token+`"}`)
		return resp.Header.Get("X-RateLimit-Limit")
	}
	if l := limit("d-good", token); l != "120" {
		t.Errorf("attested device limit %s, want 120 (60 x 2)", l)
	}
	if l := limit("d-other", ""); l != "30" {
		t.Errorf("unattested device limit %s, want 30 (60 x 0.5)", l)
	}
	_, body = adminGet(t, base+"/v1/admin/subjects/device/d-good", "tok")
	for _, want := range []string{`"effective":0.5,"effective_with_device_token":2,`, `"attestation":{"platform":"apple","verified":true`,
		`{"source":"unverified","value":0.5,"expires_at":null,"reason":"requests without a valid device token (risk.attestation.unverified_multiplier)"}`,
		`{"source":"attestation","value":2,"expires_at":"`} {
		if !strings.Contains(body, want) {
			t.Errorf("admin view of the attested device lacks %s: %s", want, body)
		}
	}
	if _, body := adminGet(t, base+"/v1/admin/subjects/device/d-other", "tok"); !strings.Contains(body, `"effective":0.5,"multipliers":[{"source":"unverified"`) || strings.Contains(body, `"source":"attestation"`) {
		t.Errorf("admin view of an unattested device: %s", body)
	}
	// a replayed challenge is refused with its reason
	resp, body = post(t, base+"/v1/attest/apple", `{"device_id":"d-good","key_id":"`+b64(att.KeyID)+`","attestation_object":"`+b64(att.Object)+`","challenge":"`+ch.Challenge+`"}`)
	if resp.StatusCode != 400 || !strings.Contains(body, `"code":"ATTESTATION_INVALID","message":"challenge: `) {
		t.Errorf("replay: %d %s", resp.StatusCode, body)
	}

	// the real user logs in from the attested device; then an attacker fails 3 times
	post(t, base+"/v1/report", `{"type":"login_succeeded","account":"alice","device_id":"d-good","device_token":"`+token+`"}`)
	for i := 0; i < 3; i++ {
		post(t, base+"/v1/report", `{"type":"login_failed","account":"alice","device_id":"d-evil"}`)
	}
	login := func(device, token string) int {
		resp, _ := post(t, base+"/v1/check", `{"endpoint":"POST /auth/login","ip":"192.0.2.1","account":"alice","device_id":"`+device+`","device_token":"`+token+`"}`)
		return resp.StatusCode
	}
	eventually(t, 5*time.Second, func() string {
		if c := login("d-evil", ""); c != 429 {
			return "attacker's device not locked out"
		}
		return ""
	})
	if c := login("d-good", token); c != 200 {
		t.Fatalf("the attested device of the real user was locked out: %d", c)
	}
	if c := login("", ""); c != 429 {
		t.Fatalf("a request without a device must be locked: %d", c)
	}
}

// TestAttestationEndpointsAreLimited: challenges (state in the store) are
// rate limited per client IP by the policy like any endpoint.
func TestAttestationEndpointsAreLimited(t *testing.T) {
	t.Parallel()
	ca := attestationtest.NewCA(t, time.Now())
	root := filepath.Join(t.TempDir(), "root.pem")
	if err := os.WriteFile(root, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Root.Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	path := writePolicy(t, `version: 1
routes:
  - {match: "POST /v1/attest/*", class: attest}
limits:
  - {name: attest-ip, by: [ip], rate: 3/min, if: {class: attest}}
risk:
  attestation:
    apple: {app_id: TEAMID1234.com.example.app, root_ca_file: `+root+`}
`)
	_, base := start(t, Config{ConfigPath: path})
	for i := 0; i < 3; i++ {
		if resp, body := post(t, base+"/v1/attest/challenge", `{"device_id":"d"}`); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "3" {
			t.Fatalf("challenge %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if resp, body := post(t, base+"/v1/attest/challenge", `{"device_id":"d"}`); resp.StatusCode != 429 || !strings.Contains(body, `"limit":"attest-ip"`) {
		t.Fatalf("4th challenge: %d %s", resp.StatusCode, body)
	}
}
