package attack

import (
	"crypto/sha256"
	"encoding/base64"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/attestation/attestationtest"
)

// TestAttackStolenTokenRetakesResetDevice: an attacker got hold of a
// device token of alice's phone once (a log line, a debugging proxy: it
// travels in every request's X-Device-Token). Alice's phone is reset (its
// App Attest key gone), an operator frees the id on her word
// (DELETE /v1/admin/attestations/{id}) and the phone attests afresh with
// a new key. The stolen token, issued before all that and still
// unexpired, let the attacker attest the id with a key of his own: he was
// answered a fresh token (the phone's, as far as every limit, lockout
// exemption and trusted-device budget can tell, renewable for ever with
// his key's assertions) and alice's new key was evicted. A replacement
// now needs the last token the id was given; the stolen one is refused at
// step device and alice's new key keeps the id.
func TestAttackStolenTokenRetakesResetDevice(t *testing.T) {
	t.Parallel()
	ca := attestationtest.NewCA(t, time.Now())
	tg := start(t, withApple(t, ca))
	const device = "reset-alice-phone"
	_, code, a := appleAttest(t, tg, ca, device, attestationtest.Options{})
	if code != 200 || a.DeviceToken == "" {
		t.Fatalf("the phone's first attestation: %d %+v", code, a)
	}
	stolen := a.DeviceToken
	// tokens carry whole seconds: the reset happens in a later one
	issued := time.Now().Unix()
	eventually(t, 3*time.Second, func() string {
		if time.Now().Unix() <= issued {
			return "same second"
		}
		return ""
	})
	if code, body := do(t, "DELETE", tg.api+"/v1/admin/attestations/"+device, "", bearer(adminToken)); code != 200 {
		t.Fatalf("operator frees the id: %d %s", code, body)
	}
	_, code, a = appleAttest(t, tg, ca, device, attestationtest.Options{})
	if code != 200 || a.DeviceToken == "" {
		t.Fatalf("the reset phone attests its new key: %d %+v", code, a)
	}
	current := a.DeviceToken

	// the attacker, with a key of his own (a genuine device) and the stolen token
	code, a = appleClaim(t, tg, ca, device, stolen)
	if code != 400 || a.Error.Code != "ATTESTATION_INVALID" || a.DeviceToken != "" {
		t.Fatalf("the attacker's key with the stolen token: %d %+v (token %t), want 400 ATTESTATION_INVALID at step device", code, a, a.DeviceToken != "")
	}
	// the phone's own last token still proves it (a reinstall with a new key)
	if code, a = appleClaim(t, tg, ca, device, current); code != 200 || a.DeviceToken == "" {
		t.Fatalf("the phone's new key with its last token: %d %+v", code, a)
	}
}

// appleClaim attests a new key for device, presenting token as the proof
// that the request comes from the device holding the id.
func appleClaim(t *testing.T, tg *target, ca *attestationtest.CA, device, token string) (int, attestAnswer) {
	t.Helper()
	code, ch := attestPost(t, tg, "challenge", "203.0.113.66", `{"device_id":"`+device+`"}`)
	if code != 200 || ch.Challenge == "" {
		t.Fatalf("challenge: %d %+v", code, ch)
	}
	sum := sha256.Sum256([]byte(ch.Challenge))
	att := ca.Attest(t, attestationtest.Options{AppID: audit3AppID, ClientDataHash: sum[:]})
	b64 := base64.StdEncoding.EncodeToString
	return attestPost(t, tg, "apple", "203.0.113.66", `{"device_id":"`+device+`","key_id":"`+b64(att.KeyID)+
		`","attestation_object":"`+b64(att.Object)+`","challenge":"`+ch.Challenge+`","device_token":"`+token+`"}`)
}
