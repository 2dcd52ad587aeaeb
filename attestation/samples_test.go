package attestation_test

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// samplesDir is the shared, read-only directory of real App Attest samples
// and Apple's root (see its README), beside the checkout and never copied
// into it. The tests that read it skip with a message naming it when it is
// missing (a fresh clone), and fail instead under TOLLGATE_REQUIRE_SHARED=1,
// which CI sets: they are the only proof that real objects verify.
var samplesDir = filepath.Join("..", "..", "shared", "attestation")

// readSample reads a file of samplesDir; the test skips when samplesDir is
// missing (see testenv.Shared) and fails when the file is.
func readSample(t testing.TB, name string) []byte {
	t.Helper()
	testenv.Shared(t, samplesDir)
	b, err := os.ReadFile(filepath.Join(samplesDir, name))
	if err != nil {
		t.Fatalf("attestation sample %s (expected at %s, the shared test data): %v", name, samplesDir, err)
	}
	return b
}

// appleRoot loads Apple's App Attestation root from the samples.
func appleRoot(t testing.TB) *x509.CertPool {
	t.Helper()
	readSample(t, "Apple_App_Attestation_Root_CA.pem")
	pool, err := attestation.LoadAppleRoot(filepath.Join(samplesDir, "Apple_App_Attestation_Root_CA.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return pool
}

func mustB64(t testing.TB, enc *base64.Encoding, s string) []byte {
	t.Helper()
	b, err := enc.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatalf("base64 %.20q...: %v", s, err)
	}
	return b
}

func mustTime(t testing.TB, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

func sum256(b []byte) []byte { s := sha256.Sum256(b); return s[:] }

// appleSample is one real attestation (and maybe an assertion) to verify.
type appleSample struct {
	name           string
	appID          string
	env            string
	object         []byte
	keyID          []byte
	clientDataHash []byte
	at             time.Time
	publicKeyPEM   string // the key the sample says was attested ("" if not given)

	assertion  []byte
	clientData []byte
	counter    uint32
}

func guideSample(t testing.TB, file, appID, keyID, challenge, at string) appleSample {
	return appleSample{
		name:           file,
		appID:          appID,
		env:            attestation.EnvironmentProduction,
		object:         mustB64(t, base64.StdEncoding, string(readSample(t, file))),
		keyID:          mustB64(t, base64.StdEncoding, keyID),
		clientDataHash: []byte(challenge), // the guide passes the raw bytes
		at:             mustTime(t, at),
	}
}

func basDSample(t testing.TB) appleSample {
	var f struct {
		Object     string `json:"attestationObjectBase64URL"`
		KeyID      string `json:"keyIdBase64"`
		ClientData string `json:"clientData"`
		AppID      string `json:"appId"`
		Env        string `json:"environment"`
		Now        string `json:"suggestedNow"`
	}
	if err := json.Unmarshal(readSample(t, "bas-d-2021-dev.attestation.json"), &f); err != nil {
		t.Fatal(err)
	}
	return appleSample{
		name: "bas-d-2021-dev", appID: f.AppID, env: f.Env,
		object:         mustB64(t, base64.RawURLEncoding, strings.TrimRight(f.Object, "=")),
		keyID:          mustB64(t, base64.StdEncoding, f.KeyID),
		clientDataHash: sum256([]byte(f.ClientData)),
		at:             mustTime(t, f.Now),
	}
}

// iosDoc is one document of the iOS 14.4 samples (YAML and JSON forms).
type iosDoc struct {
	Type        string `yaml:"type" json:"type"`
	Attestation string `yaml:"attestationBase64" json:"attestationBase64"`
	Assertion   string `yaml:"assertionBase64" json:"assertionBase64"`
	ClientData  string `yaml:"clientDataBase64" json:"clientDataBase64"`
	KeyID       string `yaml:"keyIdBase64" json:"keyIdBase64"`
	Team        string `yaml:"teamIdentifier" json:"teamIdentifier"`
	Bundle      string `yaml:"bundleIdentifier" json:"bundleIdentifier"`
	PublicKey   string `yaml:"publicKey" json:"publicKey"`
	Timestamp   string `yaml:"timestamp" json:"timestamp"`
	ValidDate   string `yaml:"validDate" json:"validDate"`
	Counter     any    `yaml:"counter" json:"counter"`
}

func iosSample(t testing.TB, name string, att, asr iosDoc, at string) appleSample {
	t.Helper()
	if att.Attestation == "" || asr.Assertion == "" {
		t.Fatalf("%s: attestation or assertion missing", name)
	}
	cd := mustB64(t, base64.StdEncoding, asr.ClientData)
	counter, err := strconv.ParseUint(strings.TrimSpace(toString(asr.Counter)), 10, 32)
	if err != nil {
		t.Fatalf("%s: counter %v: %v", name, asr.Counter, err)
	}
	return appleSample{
		name: name, appID: att.Team + "." + att.Bundle, env: attestation.EnvironmentDevelopment,
		object:         mustB64(t, base64.StdEncoding, att.Attestation),
		keyID:          mustB64(t, base64.StdEncoding, att.KeyID),
		clientDataHash: sum256(mustB64(t, base64.StdEncoding, att.ClientData)),
		at:             mustTime(t, at),
		publicKeyPEM:   att.PublicKey,
		assertion:      mustB64(t, base64.StdEncoding, asr.Assertion),
		clientData:     cd,
		counter:        uint32(counter),
	}
}

func toString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int:
		return strconv.Itoa(v)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}

func veehaitchSample(t testing.TB) appleSample {
	dec := yaml.NewDecoder(bytes.NewReader(readSample(t, "veehaitch-ios-14.4.yaml")))
	var att, asr iosDoc
	for {
		var d iosDoc
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch d.Type {
		case "attestation":
			att = d
		case "assertion":
			asr = d
		}
	}
	return iosSample(t, "veehaitch-ios-14.4", att, asr, att.Timestamp)
}

func takimotoSample(t testing.TB) appleSample {
	var f struct {
		Attestation iosDoc `json:"attestation"`
		Assertion   iosDoc `json:"assertion"`
	}
	if err := json.Unmarshal(readSample(t, "takimoto3-testdata-ios-14.4.json"), &f); err != nil {
		t.Fatal(err)
	}
	return iosSample(t, "takimoto3-ios-14.4", f.Attestation, f.Assertion, f.Attestation.ValidDate)
}

// TestRealSamples verifies every real attestation object of the shared
// samples against Apple's real root at its pinned time, and the iOS 14.4
// device's assertion against the key its attestation yields.
func TestRealSamples(t *testing.T) {
	t.Parallel()
	roots := appleRoot(t)
	samples := []appleSample{
		guideSample(t, "apple-guide-2026.attestation.b64", "1234567890.com.example.myapp",
			"zgSY9YSD+7TaDXssY6WlOPVS1K3Lmk+pFhlcSWE+ZV0=", "example_server_challenge", "2026-04-21T12:00:00Z"),
		guideSample(t, "apple-guide-2024.attestation.b64", "0352187391.com.apple.example_app_attest",
			"bSrEhF8TIzIvWSPwvZ0i2+UOBre4ASH84rK15m6emNY=", "test_server_challenge", "2024-04-18T12:00:00Z"),
		basDSample(t),
		veehaitchSample(t),
		takimotoSample(t),
	}
	for _, s := range samples {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			a := &attestation.Apple{AppID: s.appID, Environment: s.env, Roots: roots}
			key, err := a.VerifyAttestation(s.object, s.keyID, s.clientDataHash, s.at)
			if err != nil {
				t.Fatalf("VerifyAttestation: %v", err)
			}
			if !bytes.Equal(key.KeyID, s.keyID) || key.Counter != 0 || len(key.Receipt) == 0 {
				t.Fatalf("key = id %x counter %d receipt %d bytes", key.KeyID, key.Counter, len(key.Receipt))
			}
			if s.publicKeyPEM != "" {
				blk, _ := pem.Decode([]byte(s.publicKeyPEM))
				der, err := x509.MarshalPKIXPublicKey(key.PublicKey)
				if err != nil || blk == nil || !bytes.Equal(blk.Bytes, der) {
					t.Fatalf("attested key differs from the sample's publicKey (err %v)", err)
				}
			}

			// The same object must fail when anything about it is off.
			wrong := []struct {
				name     string
				a        *attestation.Apple
				keyID    []byte
				cdh      []byte
				at       time.Time
				wantStep string
			}{
				{"a year later", a, s.keyID, s.clientDataHash, s.at.AddDate(1, 0, 0), attestation.StepCertificateChain},
				{"other client data hash", a, s.keyID, []byte("other"), s.at, attestation.StepNonce},
				{"other key id", a, sum256(s.keyID), s.clientDataHash, s.at, attestation.StepKeyID},
				{"other app id", &attestation.Apple{AppID: s.appID + "x", Environment: s.env, Roots: roots}, s.keyID, s.clientDataHash, s.at, attestation.StepRPID},
				{"other environment", &attestation.Apple{AppID: s.appID, Environment: otherEnv(s.env), Roots: roots}, s.keyID, s.clientDataHash, s.at, attestation.StepAAGUID},
			}
			for _, w := range wrong {
				_, err := w.a.VerifyAttestation(s.object, w.keyID, w.cdh, w.at)
				if step := stepOf(err); step != w.wantStep {
					t.Errorf("%s: err = %v, want step %q", w.name, err, w.wantStep)
				}
			}

			if s.assertion == nil {
				return
			}
			n, err := a.VerifyAssertion(s.assertion, s.clientData, key.PublicKey, 0)
			if err != nil {
				t.Fatalf("VerifyAssertion: %v", err)
			}
			if n != s.counter {
				t.Fatalf("assertion counter = %d, want %d", n, s.counter)
			}
			if _, err := a.VerifyAssertion(s.assertion, s.clientData, key.PublicKey, n); stepOf(err) != attestation.StepCounter {
				t.Fatalf("replayed assertion: err = %v, want step counter", err)
			}
			if _, err := a.VerifyAssertion(s.assertion, []byte("wurzel"), key.PublicKey, 0); stepOf(err) != attestation.StepSignature {
				t.Fatalf("other client data: err = %v, want step signature", err)
			}
		})
	}
}

func otherEnv(env string) string {
	if env == attestation.EnvironmentDevelopment {
		return attestation.EnvironmentProduction
	}
	return attestation.EnvironmentDevelopment
}

// stepOf returns the Step of err's *Error, or "" (and the error text when
// it is another error) for a test message.
func stepOf(err error) string {
	var e *attestation.Error
	if errors.As(err, &e) {
		return e.Step
	}
	if err != nil {
		return "not an *Error: " + err.Error()
	}
	return ""
}

// TestLoadAppleRoot checks the pinned fingerprint of the real root and
// that non-certificates are refused.
func TestLoadAppleRoot(t *testing.T) {
	t.Parallel()
	blk, _ := pem.Decode(readSample(t, "Apple_App_Attestation_Root_CA.pem"))
	if blk == nil {
		t.Fatal("root: no PEM block")
	}
	const pin = "1CB9823BA28BA6AD2D33A006941DE2AE4F513EF1D4E831B9F7E0FA7B6242C932"
	if got := strings.ToUpper(hexString(sum256(blk.Bytes))); got != pin {
		t.Fatalf("root SHA-256 = %s, want %s", got, pin)
	}
	appleRoot(t)
	dir := t.TempDir()
	for _, c := range []struct{ name, body, wantErr string }{
		{"garbage.pem", "not a certificate", "no PEM certificate"},
		{"missing.pem", "", "no such file"},
	} {
		p := filepath.Join(dir, c.name)
		if c.body != "" {
			if err := os.WriteFile(p, []byte(c.body), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := attestation.LoadAppleRoot(p); err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.wantErr)
		}
	}
}

func hexString(b []byte) string {
	const hx = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, hx[c>>4], hx[c&15])
	}
	return string(out)
}
