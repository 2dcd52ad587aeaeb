package attestation_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/attestation/attestationtest"
	"github.com/tollgate-dev/tollgate/policy"
)

// TestFromPolicy builds verifiers from a policy section and environment.
func TestFromPolicy(t *testing.T) {
	t.Parallel()
	appleRoot(t) // skips (or fails under TOLLGATE_REQUIRE_SHARED) without the shared samples
	keys := attestationtest.NewPlayKeys(t)
	env := map[string]string{"DEC": keys.DecB64, "VER": keys.VerB64, "BAD": "AAAA"}
	getenv := func(k string) string { return env[k] }
	root := filepath.Join(samplesDir, "Apple_App_Attestation_Root_CA.pem")
	full := &policy.Attestation{
		Apple:   &policy.AppleAttestation{AppID: "T.com.example.app", Environment: "development", RootCAFile: root},
		Android: &policy.AndroidAttestation{PackageName: "com.example.app", DecryptionKeyEnv: "DEC", VerificationKeyEnv: "VER", MaxAge: time.Minute, RequireStrongIntegrity: true},
	}
	apple, play, err := attestation.FromPolicy("p.yaml", full, getenv)
	if err != nil {
		t.Fatal(err)
	}
	if apple.AppID != "T.com.example.app" || apple.Environment != "development" || apple.Roots == nil {
		t.Fatalf("apple = %+v", apple)
	}
	if play.PackageName != "com.example.app" || play.MaxAge != time.Minute || !play.RequireStrong || !play.VerificationKey.Equal(&keys.Signing.PublicKey) {
		t.Fatalf("play = %+v", play)
	}
	if a, p, err := attestation.FromPolicy("p.yaml", nil, getenv); a != nil || p != nil || err != nil {
		t.Fatalf("nil policy: %v %v %v", a, p, err)
	}
	for _, c := range []struct {
		name    string
		p       *policy.Attestation
		wantErr string
	}{
		{"missing root", &policy.Attestation{Apple: &policy.AppleAttestation{AppID: "T.a", RootCAFile: "/nonexistent.pem", RootCAFileLine: 6}},
			"p.yaml:6: risk.attestation.apple.root_ca_file: attestation: apple root CA: open /nonexistent.pem"},
		{"empty env", &policy.Attestation{Android: &policy.AndroidAttestation{PackageName: "a", DecryptionKeyEnv: "NOPE", VerificationKeyEnv: "VER", DecryptionKeyEnvLine: 7}},
			"p.yaml:7: risk.attestation.android.decryption_key_env: environment variable NOPE is empty or unset"},
		{"bad key", &policy.Attestation{Android: &policy.AndroidAttestation{PackageName: "a", DecryptionKeyEnv: "BAD", VerificationKeyEnv: "VER", DecryptionKeyEnvLine: 7}},
			"p.yaml:7: risk.attestation.android.decryption_key_env: environment variable BAD: attestation: play decryption key: 3 bytes, want 32 (AES-256)"},
		{"both keys", &policy.Attestation{Android: &policy.AndroidAttestation{PackageName: "a", DecryptionKeyEnv: "NOPE", VerificationKeyEnv: "DEC", DecryptionKeyEnvLine: 7, VerificationKeyEnvLine: 8}},
			"p.yaml:7: risk.attestation.android.decryption_key_env: environment variable NOPE is empty or unset\np.yaml:8: risk.attestation.android.verification_key_env: environment variable DEC: attestation: play verification key: "},
	} {
		if _, _, err := attestation.FromPolicy("p.yaml", c.p, getenv); err == nil || !strings.HasPrefix(err.Error(), c.wantErr) {
			t.Errorf("%s: err = %v, want it to start %q", c.name, err, c.wantErr)
		} else if strings.Contains(err.Error(), keys.DecB64) {
			t.Errorf("%s: err leaks a key: %v", c.name, err)
		}
	}
}
