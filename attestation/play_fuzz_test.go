package attestation_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/attestation/attestationtest"
)

// FuzzPlayVerify feeds Play.Verify arbitrary payloads, signed and
// encrypted with the verifier's own keys so that they reach the JSON
// decoding and every check after it, and (when token is not empty)
// arbitrary tokens, which stop at the JWE and JWS parsing. Verify returns
// a verdict or an *attestation.Error naming its step, never panics, and
// any verdict it returns passed every check.
//
//	go test -run '^$' -fuzz '^FuzzPlayVerify$' -fuzztime 30s ./attestation/
func FuzzPlayVerify(f *testing.F) {
	keys := attestationtest.NewPlayKeys(f)
	play := keys.Play(testPackage)
	valid, err := json.Marshal(attestationtest.PlayPayload(testPackage, testNonce, genNow.Add(-30*time.Second)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid, "")
	f.Add([]byte(`{"requestDetails":{"requestPackageName":"com.example.app","timestampMillis":1e400}}`), "")
	f.Add([]byte(`{"requestDetails":{"timestampMillis":"-9223372036854775808"}}`), "")
	f.Add([]byte(`null`), "")
	f.Add([]byte(nil), "a.b.c.d.e")
	f.Add([]byte(nil), keys.Token(f, valid)[:40])
	f.Fuzz(func(t *testing.T, payload []byte, token string) {
		if token == "" {
			token = keys.Token(t, payload)
		}
		v, err := play.Verify(token, testNonce, genNow)
		if (v == nil) == (err == nil) {
			t.Fatalf("verdict %+v and err %v", v, err)
		}
		if err != nil {
			var ae *attestation.Error
			if !errors.As(err, &ae) || ae.Step == "" {
				t.Fatalf("err %v is not an *attestation.Error with its step", err)
			}
			return
		}
		age := genNow.Sub(v.Timestamp)
		device := slices.Contains(v.DeviceRecognitionVerdict, attestation.MeetsDeviceIntegrity) ||
			slices.Contains(v.DeviceRecognitionVerdict, attestation.MeetsStrongIntegrity)
		if v.PackageName != testPackage || v.Nonce != testNonce || v.AppRecognitionVerdict != attestation.PlayRecognized ||
			!device || age > attestation.DefaultMaxAge || age < -time.Minute {
			t.Fatalf("a verdict that fails a check passed: %+v (age %v)", v, age)
		}
	})
}
