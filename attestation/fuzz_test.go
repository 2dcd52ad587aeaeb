package attestation_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/attestation/attestationtest"
)

// FuzzVerifyAttestation feeds arbitrary bytes to the attestation object
// parser and verifier: it must return an error or a key, never panic.
// Seeds are the real samples and a generated valid object.
//
//	go test -run '^$' -fuzz '^FuzzVerifyAttestation$' -fuzztime 20s -fuzzminimizetime 2s ./attestation/
//
// (A short -fuzzminimizetime keeps the fuzzer fuzzing: minimizing each new
// multi-kilobyte input otherwise takes up to a minute.)
func FuzzVerifyAttestation(f *testing.F) {
	ca := attestationtest.NewCA(f, genNow)
	cdh := sum256([]byte("fuzz"))
	att := ca.Attest(f, attestationtest.Options{AppID: testAppID, ClientDataHash: cdh, Trailing: []byte{0xa0}})
	f.Add(att.Object, att.KeyID)
	for _, name := range []string{"apple-guide-2026.attestation.b64", "apple-guide-2024.attestation.b64"} {
		f.Add(mustB64(f, base64.StdEncoding, strings.TrimSpace(string(readSample(f, name)))), make([]byte, 32))
	}
	f.Add([]byte{0xa3, 0x63, 'f', 'm', 't'}, []byte{})
	real := appleRoot(f)
	verifiers := []*attestation.Apple{
		ca.Apple(testAppID, attestation.EnvironmentProduction),
		{AppID: "1234567890.com.example.myapp", Roots: real},
	}
	f.Fuzz(func(t *testing.T, obj, keyID []byte) {
		for _, a := range verifiers {
			key, err := a.VerifyAttestation(obj, keyID, cdh, genNow)
			if (key == nil) == (err == nil) {
				t.Fatalf("key %v and err %v", key, err)
			}
		}
	})
}

// FuzzVerifyAssertion does the same for assertions.
func FuzzVerifyAssertion(f *testing.F) {
	ca := attestationtest.NewCA(f, genNow)
	att := ca.Attest(f, attestationtest.Options{AppID: testAppID, ClientDataHash: sum256(nil)})
	f.Add(attestationtest.Assertion(f, att.Key, testAppID, 1, []byte("cd")), []byte("cd"))
	f.Add([]byte{0xa2}, []byte{})
	a := ca.Apple(testAppID, "")
	f.Fuzz(func(t *testing.T, assertion, clientData []byte) {
		n, err := a.VerifyAssertion(assertion, clientData, &att.Key.PublicKey, 0)
		if err == nil && n == 0 {
			t.Fatal("passed with counter 0")
		}
	})
}
