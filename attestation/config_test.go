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
	apple, play, err := attestation.FromPolicy(full, getenv)
	if err != nil {
		t.Fatal(err)
	}
	if apple.AppID != "T.com.example.app" || apple.Environment != "development" || apple.Roots == nil {
		t.Fatalf("apple = %+v", apple)
	}
	if play.PackageName != "com.example.app" || play.MaxAge != time.Minute || !play.RequireStrong || !play.VerificationKey.Equal(&keys.Signing.PublicKey) {
		t.Fatalf("play = %+v", play)
	}
	if a, p, err := attestation.FromPolicy(nil, getenv); a != nil || p != nil || err != nil {
		t.Fatalf("nil policy: %v %v %v", a, p, err)
	}
	for _, c := range []struct {
		name    string
		p       *policy.Attestation
		wantErr string
	}{
		{"missing root", &policy.Attestation{Apple: &policy.AppleAttestation{AppID: "T.a", RootCAFile: "/nonexistent.pem"}}, "/nonexistent.pem"},
		{"empty env", &policy.Attestation{Android: &policy.AndroidAttestation{PackageName: "a", DecryptionKeyEnv: "NOPE", VerificationKeyEnv: "VER"}}, "NOPE (decryption_key_env) is empty"},
		{"bad key", &policy.Attestation{Android: &policy.AndroidAttestation{PackageName: "a", DecryptionKeyEnv: "BAD", VerificationKeyEnv: "VER"}}, "keys from BAD and VER"},
	} {
		if _, _, err := attestation.FromPolicy(c.p, getenv); err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.wantErr)
		} else if strings.Contains(err.Error(), keys.DecB64) {
			t.Errorf("%s: err leaks a key: %v", c.name, err)
		}
	}
}
