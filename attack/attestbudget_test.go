package attack

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/attestation/attestationtest"
	"github.com/tollgate-dev/tollgate/policy"
)

// Attack: one client behind a carrier-grade NAT holds the address's
// attestation budget (risk.attestation.max_per_ip) empty with bogus
// attestations, which cost it nothing to make: every attestation took a
// token before its proof was verified, so the genuine phones behind the
// same address were answered 429 and stayed unverified until the bucket
// refilled, and so did every renewal of a phone already attested there.
// Defence: only an attestation that verified and binds a new device id
// takes from the budget; failures (bounded by the route limits) and
// renewals (the same App Attest key again, or the id's last device
// token) do not. Minting ids is bounded as before: once max_per_ip new
// ids are verified, the next new one is answered 429 naming
// attestation-ip, and is not recorded.
func TestAttackBogusAttestationsStarveTheAddress(t *testing.T) {
	t.Parallel()
	const nat, perIP = "198.51.100.88", 3
	ca := attestationtest.NewCA(t, time.Now())
	tg := start(t, withAppleAnd(t, ca, fmt.Sprintf("    max_per_ip: %d/h\n", perIP)))
	for i := range 2 * perIP { // the attacker's garbage: a valid challenge, a forged object
		body := appleBody(t, tg, nat, fmt.Sprintf("bogus-%d", i), []byte("not an attestation"), []byte("forged key id"))
		if code, a := attestPost(t, tg, "apple", nat, body); code != http.StatusBadRequest || a.Error.Code != "ATTESTATION_INVALID" {
			t.Fatalf("bogus attestation %d: %d %+v, want 400 ATTESTATION_INVALID", i, code, a)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// a genuine phone behind the same address attests, then renews with
	// its key more times than the budget holds
	for i := range perIP + 2 {
		if _, code, a := appleAttestFrom(t, tg, ca, nat, "nat-genuine-phone", attestationtest.Options{Key: key}); code != http.StatusOK || a.DeviceToken == "" {
			t.Fatalf("genuine phone's attestation %d behind the flooded address: %d %+v, want 200 with a device token", i, code, a)
		}
	}
	// new ids: the budget's other perIP-1 pass, the next is limited
	for i := range perIP - 1 {
		if _, code, a := appleAttestFrom(t, tg, ca, nat, fmt.Sprintf("nat-phone-%d", i), attestationtest.Options{}); code != http.StatusOK {
			t.Fatalf("new id %d: %d %+v, want 200", i, code, a)
		}
	}
	_, code, a := appleAttestFrom(t, tg, ca, nat, "nat-phone-over", attestationtest.Options{})
	if code != http.StatusTooManyRequests || a.Error.Code != "RATE_LIMITED" || a.Error.Details.Limit != policy.AttestationLimitName {
		t.Fatalf("new id past max_per_ip: %d %+v, want 429 RATE_LIMITED by %s", code, a, policy.AttestationLimitName)
	}
	_, body := do(t, "GET", tg.api+"/v1/admin/subjects/device/nat-phone-over", "", bearer(adminToken))
	if !strings.Contains(body, `"attestation":null`) {
		t.Errorf("the limited id was recorded: %s", body)
	}
	_, metrics := do(t, "GET", tg.api+"/metrics", "", nil)
	for _, want := range []string{
		fmt.Sprintf(`tollgate_decisions_total{class="write",limit="%s",result="allowed"} %d`, policy.AttestationLimitName, perIP),
		fmt.Sprintf(`tollgate_decisions_total{class="write",limit="%s",result="limited"} 1`, policy.AttestationLimitName),
		fmt.Sprintf(`tollgate_attestations_total{endpoint="apple",result="failed",step="decode"} %d`, 2*perIP),
		fmt.Sprintf(`tollgate_attestations_total{endpoint="apple",result="verified",step=""} %d`, perIP),
		fmt.Sprintf(`tollgate_attestations_total{endpoint="apple",result="renewed",step=""} %d`, perIP+1),
		`tollgate_attestations_total{endpoint="apple",result="limited",step=""} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// appleAttestFrom attests for device from ip as the app does: a
// challenge, then the attestation object over its hash (o.Key nil: a new
// key).
func appleAttestFrom(t *testing.T, tg *target, ca *attestationtest.CA, ip, device string, o attestationtest.Options) (*attestationtest.Attested, int, attestAnswer) {
	t.Helper()
	code, ch := attestPost(t, tg, "challenge", ip, `{"device_id":"`+device+`"}`)
	if code != http.StatusOK || ch.Challenge == "" {
		t.Fatalf("challenge: %d %+v", code, ch)
	}
	sum := sha256.Sum256([]byte(ch.Challenge))
	o.AppID, o.ClientDataHash = audit3AppID, sum[:]
	att := ca.Attest(t, o)
	code, a := attestPost(t, tg, "apple", ip, appleJSON(device, ch.Challenge, att.KeyID, att.Object))
	return att, code, a
}

// appleBody fetches a challenge for device from ip and returns an
// attestation body carrying obj and keyID over it.
func appleBody(t *testing.T, tg *target, ip, device string, obj, keyID []byte) string {
	t.Helper()
	code, ch := attestPost(t, tg, "challenge", ip, `{"device_id":"`+device+`"}`)
	if code != http.StatusOK || ch.Challenge == "" {
		t.Fatalf("challenge: %d %+v", code, ch)
	}
	return appleJSON(device, ch.Challenge, keyID, obj)
}

// appleJSON is the body of POST /v1/attest/apple.
func appleJSON(device, challenge string, keyID, obj []byte) string {
	b64 := base64.StdEncoding.EncodeToString
	return `{"device_id":"` + device + `","key_id":"` + b64(keyID) + `","attestation_object":"` + b64(obj) + `","challenge":"` + challenge + `"}`
}
