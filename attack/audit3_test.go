package attack

import (
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/attestation/attestationtest"
	"github.com/tollgate-dev/tollgate/service"
)

// audit3AppID is the App Attest app of the audited deployment.
const audit3AppID = "TEAMID1234.com.example.app"

// withApple runs the limiter under the attack policy with App Attest
// configured against ca's root (riskd keeps the attack policy: it
// verifies no attestation).
func withApple(t *testing.T, ca *attestationtest.CA) setup {
	t.Helper()
	return withAppleAnd(t, ca, "")
}

// withAppleAnd is withApple with more lines of risk.attestation.
func withAppleAnd(t *testing.T, ca *attestationtest.CA, more string) setup {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "root.pem")
	if err := os.WriteFile(root, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Root.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "policy.yaml")
	text := attackPolicy + "    apple: {app_id: " + audit3AppID + ", environment: production, root_ca_file: " + root + "}\n" + more
	if err := os.WriteFile(pol, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return func(c *service.Config) { c.ConfigPath = pol }
}

// attestAnswer is the success answer of an attestation endpoint, or its
// envelope.
type attestAnswer struct {
	Status      string `json:"status"`
	Challenge   string `json:"challenge"`
	DeviceToken string `json:"device_token"`
	Error       struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Details struct {
			Limit string `json:"limit"`
		} `json:"details"`
	} `json:"error"`
}

// attestPost posts body to the public listener's attestation path p from ip.
func attestPost(t *testing.T, tg *target, p, ip, body string) (int, attestAnswer) {
	t.Helper()
	code, resp := do(t, "POST", tg.public+"/v1/attest/"+p, body, from(ip))
	var a attestAnswer
	if err := json.Unmarshal([]byte(resp), &a); err != nil {
		t.Fatalf("%s: %d %q is not JSON", p, code, resp)
	}
	return code, a
}

// appleAttest attests key (nil: a new one) for device as the app does
// (appleAttestFrom), from the suite's usual app address.
func appleAttest(t *testing.T, tg *target, ca *attestationtest.CA, device string, o attestationtest.Options) (*attestationtest.Attested, int, attestAnswer) {
	t.Helper()
	return appleAttestFrom(t, tg, ca, "198.51.100.30", device, o)
}

// Attack: an assertion seen once (a log, a proxy, a compromised network)
// is replayed after its device attested the same App Attest key again.
// The re-attestation stored the key with counter 0 (an attestation's
// counter), so every assertion the key had signed since passed once more,
// and each replay was answered a fresh device token of the victim's
// device: the attacker's requests then counted as that attested device.
// Defence: a fresh attestation of the key an id already holds keeps the
// id's counter; the replay fails at step counter.
func TestAttackAssertionReplayAfterReattestation(t *testing.T) {
	t.Parallel()
	ca := attestationtest.NewCA(t, time.Now())
	tg := start(t, withApple(t, ca))
	const device = "a3-victim-phone"
	att, code, a := appleAttest(t, tg, ca, device, attestationtest.Options{})
	if code != 200 || a.Status != "verified" {
		t.Fatalf("attest: %d %+v", code, a)
	}
	b64 := base64.StdEncoding.EncodeToString
	// the victim's app makes an assertion (counter 1); the attacker keeps a copy
	cd := []byte(`{"action":"login","n":1}`)
	seen := `{"device_id":"` + device + `","key_id":"` + b64(att.KeyID) + `","assertion":"` +
		b64(attestationtest.Assertion(t, att.Key, audit3AppID, 1, cd)) + `","client_data":"` + b64(cd) + `"}`
	if code, a := attestPost(t, tg, "apple/assertion", "198.51.100.30", seen); code != 200 {
		t.Fatalf("assertion: %d %+v", code, a)
	}
	if code, a := attestPost(t, tg, "apple/assertion", "203.0.113.66", seen); code != 400 || !strings.HasPrefix(a.Error.Message, "counter: ") {
		t.Fatalf("replay before re-attestation: %d %+v, want 400 counter", code, a)
	}
	// the app attests the same key again (reinstalled state, a retry)
	if _, code, a := appleAttest(t, tg, ca, device, attestationtest.Options{Key: att.Key}); code != 200 {
		t.Fatalf("re-attestation of the same key: %d %+v", code, a)
	}
	code, a = attestPost(t, tg, "apple/assertion", "203.0.113.66", seen)
	if code != 400 || a.Error.Code != "ATTESTATION_INVALID" || !strings.HasPrefix(a.Error.Message, "counter: ") || a.DeviceToken != "" {
		t.Fatalf("the replayed assertion after re-attestation: %d %+v (token %t), want 400 ATTESTATION_INVALID counter", code, a, a.DeviceToken != "")
	}
	// the device itself goes on with its next counter
	cd = []byte(`{"action":"login","n":2}`)
	next := `{"device_id":"` + device + `","key_id":"` + b64(att.KeyID) + `","assertion":"` +
		b64(attestationtest.Assertion(t, att.Key, audit3AppID, 2, cd)) + `","client_data":"` + b64(cd) + `"}`
	if code, a := attestPost(t, tg, "apple/assertion", "198.51.100.30", next); code != 200 || a.DeviceToken == "" {
		t.Fatalf("the device's next assertion: %d %+v", code, a)
	}
}
