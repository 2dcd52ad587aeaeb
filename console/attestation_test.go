package console_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/attestation/attestationtest"
)

const testAppID = "TEAMID1234.com.example.app"

// startAttesting runs the one-process default under a policy that
// verifies App Attest from a test CA, and returns its base URL and the CA.
func startAttesting(t *testing.T) (string, *attestationtest.CA) {
	t.Helper()
	ca := attestationtest.NewCA(t, time.Now())
	root := filepath.Join(t.TempDir(), "root.pem")
	if err := os.WriteFile(root, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Root.Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return startPolicy(t, adminToken, `version: 1
limits:
  - {name: device, by: [device], rate: 60/min}
risk:
  attestation:
    valid_for: 24h
    apple: {app_id: `+testAppID+`, environment: production, root_ca_file: `+root+`}
`), ca
}

// attest attests device with a fresh App Attest key and returns the status.
func attest(t *testing.T, base string, ca *attestationtest.CA, device string) int {
	t.Helper()
	code, _ := attestToken(t, base, ca, device)
	return code
}

// attestToken attests device with a fresh App Attest key and returns the
// status and the device token the limiter answered.
func attestToken(t *testing.T, base string, ca *attestationtest.CA, device string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	post := func(path, body string) (int, string) {
		resp, err := c.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		return resp.StatusCode, b.String()
	}
	_, body := post("/v1/attest/challenge", `{"device_id":"`+device+`"}`)
	var ch struct{ Challenge string }
	if err := json.Unmarshal([]byte(body), &ch); err != nil || ch.Challenge == "" {
		t.Fatalf("challenge: %s", body)
	}
	hash := sha256.Sum256([]byte(ch.Challenge))
	att := ca.Attest(t, attestationtest.Options{AppID: testAppID, ClientDataHash: hash[:]})
	b64 := base64.StdEncoding.EncodeToString
	code, body := post("/v1/attest/apple", `{"device_id":"`+device+`","key_id":"`+b64(att.KeyID)+`","attestation_object":"`+b64(att.Object)+`","challenge":"`+ch.Challenge+`"}`)
	var tok struct {
		DeviceToken string `json:"device_token"`
	}
	_ = json.Unmarshal([]byte(body), &tok)
	return code, tok.DeviceToken
}

// TestForgetAttestation: the device's subject page shows its attestation
// and a button to forget it; pressed, the console frees the id through
// the admin API (audited as attestation_forget) and another key may then
// attest it.
func TestForgetAttestation(t *testing.T) {
	t.Parallel()
	base, ca := startAttesting(t)
	if code := attest(t, base, ca, "d-lost"); code != 200 {
		t.Fatalf("first attestation: %d", code)
	}
	if code := attest(t, base, ca, "d-lost"); code != 400 {
		t.Fatalf("a new key while the id is bound: %d, want 400", code)
	}
	c := newClient(t)
	csrf := signIn(t, c, base)
	page := "/console/subjects?subject=device&id=d-lost"
	if _, body := do(t, c, "GET", base+page, nil); !strings.Contains(body, `data-forget="d-lost"`) {
		t.Fatalf("no forget button on the device's page: %s", body)
	}
	resp, _ := do(t, c, "POST", base+"/console/attestations/forget", url.Values{"csrf": {csrf}, "id": {"d-lost"}, "back": {page}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != page {
		t.Fatalf("forget: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	_, body := do(t, c, "GET", base+page, nil)
	if !strings.Contains(body, "Forgot the attestation of device d-lost") || strings.Contains(body, `data-forget=`) {
		t.Fatalf("after the forget: %s", body)
	}
	if code := attest(t, base, ca, "d-lost"); code != 200 {
		t.Fatalf("the owner's new key after the forget: %d", code)
	}
	waitFor(t, func() string {
		for _, e := range list(t, base, "/v1/admin/audit") {
			if e.Action == "attestation_forget" && e.Subject == "device" && e.ID == "d-lost" {
				return ""
			}
		}
		return "no attestation_forget audited"
	})
}

// TestRevokeTrustedDevice (7.1): an account's subject page lists its
// trusted devices, each with a button to revoke it; pressed, the console
// revokes it through the admin API (audited as trust_revoke), the page no
// longer lists it, and "Revoke every device" empties the list.
func TestRevokeTrustedDevice(t *testing.T) {
	t.Parallel()
	base, ca := startAttesting(t)
	for _, d := range []string{"phone", "tablet"} {
		code, token := attestToken(t, base, ca, d)
		if code != 200 || token == "" {
			t.Fatalf("attestation of %s: %d", d, code)
		}
		resp, err := http.Post(base+"/v1/report", "application/json", strings.NewReader(
			`{"type":"login_succeeded","account":"alice","device_id":"`+d+`","device_token":"`+token+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("report: %d", resp.StatusCode)
		}
	}
	c := newClient(t)
	csrf := signIn(t, c, base)
	page := "/console/subjects?subject=account&id=alice"
	waitFor(t, func() string {
		if _, body := do(t, c, "GET", base+page, nil); !strings.Contains(body, `data-revoke="phone"`) || !strings.Contains(body, `data-revoke="tablet"`) {
			return "alice's page lists no revoke buttons of both devices yet"
		}
		return ""
	})
	resp, _ := do(t, c, "POST", base+"/console/trusted-devices/revoke", url.Values{"csrf": {csrf}, "account": {"alice"}, "device": {"phone"}, "back": {page}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != page {
		t.Fatalf("revoke: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	_, body := do(t, c, "GET", base+page, nil)
	if !strings.Contains(body, "Device phone is no longer a trusted device of alice.") || strings.Contains(body, `data-revoke="phone"`) || !strings.Contains(body, `data-revoke="tablet"`) {
		t.Fatalf("after revoking the phone: %s", body)
	}
	resp, _ = do(t, c, "POST", base+"/console/trusted-devices/revoke", url.Values{"csrf": {csrf}, "account": {"alice"}, "back": {page}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoke all: %d", resp.StatusCode)
	}
	_, body = do(t, c, "GET", base+page, nil)
	if !strings.Contains(body, "alice has no trusted devices any more.") || strings.Contains(body, `data-revoke=`) {
		t.Fatalf("after revoking every device: %s", body)
	}
	// without the form's token the change is refused
	if resp, _ := do(t, c, "POST", base+"/console/trusted-devices/revoke", url.Values{"account": {"alice"}, "back": {page}}); resp.StatusCode == http.StatusSeeOther {
		t.Fatal("a revocation without the csrf token was taken")
	}
	waitFor(t, func() string {
		n := 0
		for _, e := range list(t, base, "/v1/admin/audit") {
			if e.Action == "trust_revoke" && e.Subject == "account" && e.ID == "alice" {
				n++
			}
		}
		if n != 2 {
			return "trust_revoke audited " + strconv.Itoa(n) + " times, want 2"
		}
		return ""
	})
	_, trail := do(t, c, "GET", base+"/console/audit", nil)
	if !strings.Contains(trail, "device <code>phone</code>: was in force") || !strings.Contains(trail, "every device: was in force") {
		t.Fatalf("the audit trail does not name what was revoked: %s", trail)
	}
}
