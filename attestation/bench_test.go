package attestation_test

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/attestation/attestationtest"
)

// BenchmarkVerifyAttestation is the CPU a forged App Attest attestation
// costs the limiter before it is refused (docs/attestation.md: failed
// attestations take no address budget, so the route limits bound what
// they cost): "valid" runs every check (past the first, its intermediate
// known: the leaf's signature alone), "wrong root" fails at the chain
// (two signatures), "garbage" at the CBOR decoding.
func BenchmarkVerifyAttestation(b *testing.B) {
	now := time.Now()
	ca, other := attestationtest.NewCA(b, now), attestationtest.NewCA(b, now)
	sum := sha256.Sum256([]byte("challenge"))
	att := ca.Attest(b, attestationtest.Options{AppID: testAppID, ClientDataHash: sum[:]})
	for _, bc := range []struct {
		name  string
		apple *attestation.Apple
		obj   []byte
	}{
		{"valid", ca.Apple(testAppID, attestation.EnvironmentProduction), att.Object},
		{"wrong root", other.Apple(testAppID, attestation.EnvironmentProduction), att.Object},
		{"garbage", ca.Apple(testAppID, attestation.EnvironmentProduction), []byte("not an attestation")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				bc.apple.VerifyAttestation(bc.obj, att.KeyID, sum[:], now)
			}
		})
	}
}
