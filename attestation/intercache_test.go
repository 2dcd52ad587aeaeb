package attestation_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/attestation/attestationtest"
)

// TestVerifyChainReusesIntermediate: once an intermediate chained to the
// root, the next chains through it verify the leaf's signature alone (an
// hour at most, never past the intermediate's end), and still refuse
// what the whole chain refuses: a leaf another CA signed presenting the
// known intermediate, an expired leaf. Past the hour, or at an earlier
// time, the whole chain is verified again.
func TestVerifyChainReusesIntermediate(t *testing.T) {
	t.Parallel()
	ca, other := attestationtest.NewCA(t, genNow), attestationtest.NewCA(t, genNow)
	a := ca.Apple(testAppID, attestation.EnvironmentProduction)
	cdh := sum256([]byte("challenge-text"))
	verify := func(att *attestationtest.Attested, now time.Time) error {
		_, err := a.VerifyAttestation(att.Object, att.KeyID, cdh, now)
		return err
	}
	valid := func() *attestationtest.Attested {
		return ca.Attest(t, attestationtest.Options{AppID: testAppID, ClientDataHash: cdh})
	}
	for i, now := range []time.Time{genNow, genNow.Add(time.Minute), genNow.Add(2 * time.Hour), genNow.Add(-time.Minute)} {
		if err := verify(valid(), now); err != nil {
			t.Fatalf("valid attestation %d at %v: %v", i, now, err)
		}
	}
	// another CA's leaf with this CA's intermediate beside it
	forged := other.Attest(t, attestationtest.Options{AppID: testAppID, ClientDataHash: cdh})
	forged.Object = withIntermediate(t, forged.Object, ca.Intermediate.Raw)
	expired := ca.Attest(t, attestationtest.Options{AppID: testAppID, ClientDataHash: cdh, NotBefore: genNow.Add(-96 * time.Hour), NotAfter: genNow.Add(-time.Minute)})
	for name, att := range map[string]*attestationtest.Attested{"another CA's leaf": forged, "an expired leaf": expired} {
		var ae *attestation.Error
		if err := verify(att, genNow); !errors.As(err, &ae) || ae.Step != attestation.StepCertificateChain {
			t.Errorf("%s through the known intermediate: %v, want step %q", name, err, attestation.StepCertificateChain)
		}
	}
}

// withIntermediate returns the attestation object obj with der as its
// x5c's intermediate.
func withIntermediate(t *testing.T, obj, der []byte) []byte {
	t.Helper()
	var o struct {
		Fmt     string `cbor:"fmt"`
		AttStmt struct {
			X5c     [][]byte `cbor:"x5c"`
			Receipt []byte   `cbor:"receipt"`
		} `cbor:"attStmt"`
		AuthData []byte `cbor:"authData"`
	}
	if err := cbor.Unmarshal(obj, &o); err != nil || len(o.AttStmt.X5c) != 2 {
		t.Fatalf("attestation object: %v (x5c of %d)", err, len(o.AttStmt.X5c))
	}
	o.AttStmt.X5c[1] = der
	b, err := cbor.Marshal(&o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
