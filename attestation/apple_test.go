package attestation_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/attestation/attestationtest"
)

// genNow is the fixed clock of the generated-chain tests.
var genNow = time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC)

const testAppID = "TEAMID1234.com.example.app"

// TestVerifyAttestationGenerated walks every check of VerifyAttestation
// with a private PKI: one valid object per environment, then one object
// per failure, each expected to fail at its own step.
func TestVerifyAttestationGenerated(t *testing.T) {
	t.Parallel()
	ca := attestationtest.NewCA(t, genNow)
	other := attestationtest.NewCA(t, genNow)
	cdh := sum256([]byte("challenge-text"))
	otherKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherPoint, _ := otherKey.PublicKey.Bytes()

	type tc struct {
		name     string
		opts     attestationtest.Options
		apple    *attestation.Apple
		keyID    func(a *attestationtest.Attested) []byte
		cdh      []byte
		now      time.Time
		wantStep string
		wantErr  string
	}
	prod := ca.Apple(testAppID, attestation.EnvironmentProduction)
	dev := ca.Apple(testAppID, attestation.EnvironmentDevelopment)
	cases := []tc{
		{name: "valid production", apple: prod},
		{name: "valid with empty environment means production", apple: ca.Apple(testAppID, "")},
		{name: "valid development", apple: dev, opts: attestationtest.Options{AAGUID: attestationtest.AAGUIDDevelopment}},
		{name: "valid with trailing CBOR after the COSE key", apple: prod, opts: attestationtest.Options{Trailing: []byte{0xa1, 0x61, 0x61, 0x01}}},
		{name: "wrong root", apple: other.Apple(testAppID, attestation.EnvironmentProduction), wantStep: attestation.StepCertificateChain, wantErr: "unknown authority"},
		{name: "expired leaf", apple: prod, opts: attestationtest.Options{NotBefore: genNow.Add(-96 * time.Hour), NotAfter: genNow.Add(-time.Hour)}, wantStep: attestation.StepCertificateChain, wantErr: "expired"},
		{name: "leaf not yet valid", apple: prod, opts: attestationtest.Options{NotBefore: genNow.Add(time.Hour)}, wantStep: attestation.StepCertificateChain},
		{name: "verified a week later", apple: prod, now: genNow.Add(7 * 24 * time.Hour), wantStep: attestation.StepCertificateChain},
		{name: "wrong nonce in the certificate", apple: prod, opts: attestationtest.Options{Nonce: sum256([]byte("x"))}, wantStep: attestation.StepNonce, wantErr: "does not match the certificate's nonce extension"},
		{name: "short nonce in the certificate", apple: prod, opts: attestationtest.Options{Nonce: []byte("short")}, wantStep: attestation.StepNonce, wantErr: "holds 5 bytes"},
		{name: "other challenge", apple: prod, cdh: sum256([]byte("another challenge")), wantStep: attestation.StepNonce},
		{name: "wrong key id", apple: prod, keyID: func(*attestationtest.Attested) []byte { s := sha256.Sum256(otherPoint); return s[:] }, wantStep: attestation.StepKeyID},
		{name: "wrong app id", apple: ca.Apple("TEAMID1234.com.example.other", attestation.EnvironmentProduction), wantStep: attestation.StepRPID, wantErr: "com.example.other"},
		{name: "non-zero counter", apple: prod, opts: attestationtest.Options{Counter: 3}, wantStep: attestation.StepCounter, wantErr: "is 3, want 0"},
		{name: "development aaguid in production", apple: prod, opts: attestationtest.Options{AAGUID: attestationtest.AAGUIDDevelopment}, wantStep: attestation.StepAAGUID, wantErr: "appattestdevelop"},
		{name: "production aaguid in development", apple: dev, wantStep: attestation.StepAAGUID, wantErr: "for environment development"},
		{name: "credential id is not the key id", apple: prod, opts: attestationtest.Options{CredentialID: bytes.Repeat([]byte{7}, 32)}, wantStep: attestation.StepCredentialID},
		{name: "other format", apple: prod, opts: attestationtest.Options{Fmt: "packed"}, wantStep: attestation.StepFormat, wantErr: `"packed"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			o := c.opts
			o.AppID = testAppID
			o.ClientDataHash = cdh
			att := ca.Attest(t, o)
			keyID := att.KeyID
			if c.keyID != nil {
				keyID = c.keyID(att)
			}
			verifyCDH := cdh
			if c.cdh != nil {
				verifyCDH = c.cdh
			}
			now := genNow
			if !c.now.IsZero() {
				now = c.now
			}
			key, err := c.apple.VerifyAttestation(att.Object, keyID, verifyCDH, now)
			if c.wantStep == "" {
				if err != nil {
					t.Fatalf("err = %v, want success", err)
				}
				if !key.PublicKey.Equal(&att.Key.PublicKey) || !bytes.Equal(key.KeyID, att.KeyID) || string(key.Receipt) != "test receipt" {
					t.Fatalf("key = %+v", key)
				}
				return
			}
			var e *attestation.Error
			if !errors.As(err, &e) || e.Step != c.wantStep {
				t.Fatalf("err = %v, want step %q", err, c.wantStep)
			}
			if !strings.HasPrefix(err.Error(), "attestation: "+c.wantStep+": ") || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("err = %q, want it to start with the step and contain %q", err, c.wantErr)
			}
			if e.Message() != strings.TrimPrefix(err.Error(), "attestation: ") || errors.Unwrap(err) != e.Err {
				t.Fatalf("Message/Unwrap disagree with Error: %q", e.Message())
			}
		})
	}
}

// TestVerifyAttestationMalformed feeds objects that are not attestations.
func TestVerifyAttestationMalformed(t *testing.T) {
	t.Parallel()
	ca := attestationtest.NewCA(t, genNow)
	a := ca.Apple(testAppID, "")
	for _, c := range []struct {
		name     string
		obj      []byte
		wantStep string
	}{
		{"empty", nil, attestation.StepDecode},
		{"not CBOR", []byte("hello"), attestation.StepDecode},
		{"CBOR array", []byte{0x81, 0x01}, attestation.StepDecode},
		{"no x5c", []byte("\xa2cfmtoapple-appattesthauthDataA\x00"), attestation.StepFormat},
		{"huge", make([]byte, 40<<10), attestation.StepDecode},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if _, err := a.VerifyAttestation(c.obj, make([]byte, 32), make([]byte, 32), genNow); stepOf(err) != c.wantStep {
				t.Fatalf("err = %v, want step %q", err, c.wantStep)
			}
		})
	}
	for _, bad := range []*attestation.Apple{nil, {}, {AppID: "x"}, {AppID: "x", Roots: ca.Pool, Environment: "staging"}} {
		if _, err := bad.VerifyAttestation(nil, nil, nil, genNow); !errors.Is(err, attestation.ErrNotConfigured) {
			t.Errorf("%+v: err = %v, want ErrNotConfigured", bad, err)
		}
	}
}

// TestVerifyAssertionGenerated covers every check of VerifyAssertion.
func TestVerifyAssertionGenerated(t *testing.T) {
	t.Parallel()
	ca := attestationtest.NewCA(t, genNow)
	a := ca.Apple(testAppID, "")
	att := ca.Attest(t, attestationtest.Options{AppID: testAppID, ClientDataHash: sum256([]byte("c"))})
	key, err := a.VerifyAttestation(att.Object, att.KeyID, sum256([]byte("c")), genNow)
	if err != nil {
		t.Fatal(err)
	}
	stranger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	body := []byte(`{"action":"transfer","challenge":"abc"}`)
	for _, c := range []struct {
		name       string
		assertion  []byte
		clientData []byte
		prev       uint32
		wantStep   string
		want       uint32
	}{
		{name: "first assertion", assertion: attestationtest.Assertion(t, att.Key, testAppID, 1, body), prev: 0, want: 1},
		{name: "counter jumps", assertion: attestationtest.Assertion(t, att.Key, testAppID, 90, body), prev: 7, want: 90},
		{name: "counter not increasing", assertion: attestationtest.Assertion(t, att.Key, testAppID, 5, body), prev: 5, wantStep: attestation.StepCounter},
		{name: "counter going back", assertion: attestationtest.Assertion(t, att.Key, testAppID, 4, body), prev: 5, wantStep: attestation.StepCounter},
		{name: "signed by another key", assertion: attestationtest.Assertion(t, stranger, testAppID, 6, body), prev: 5, wantStep: attestation.StepSignature},
		{name: "other client data", assertion: attestationtest.Assertion(t, att.Key, testAppID, 6, body), clientData: []byte("tampered"), prev: 5, wantStep: attestation.StepSignature},
		{name: "other app id", assertion: attestationtest.Assertion(t, att.Key, "TEAMID1234.com.example.other", 6, body), prev: 5, wantStep: attestation.StepRPID},
		{name: "not CBOR", assertion: []byte{0xff}, wantStep: attestation.StepDecode},
		{name: "short authenticator data", assertion: []byte("\xa2isignatureA\x01qauthenticatorDataA\x00"), wantStep: attestation.StepDecode},
		{name: "no signature", assertion: []byte("\xa1qauthenticatorDataA\x00"), wantStep: attestation.StepDecode},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cd := body
			if c.clientData != nil {
				cd = c.clientData
			}
			n, err := a.VerifyAssertion(c.assertion, cd, key.PublicKey, c.prev)
			if c.wantStep == "" {
				if err != nil || n != c.want {
					t.Fatalf("counter %d, err %v; want %d", n, err, c.want)
				}
				return
			}
			if stepOf(err) != c.wantStep {
				t.Fatalf("err = %v, want step %q", err, c.wantStep)
			}
		})
	}
	if _, err := a.VerifyAssertion(nil, nil, nil, 0); stepOf(err) != attestation.StepPublicKey {
		t.Fatalf("nil key: err = %v", err)
	}
}
