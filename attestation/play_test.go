package attestation_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/attestation/attestationtest"
)

const (
	testPackage = "com.example.app"
	testNonce   = "q0mBdL1dQ4gW2b3Kc9yRrZs5tXvP7n8aA1bC2dE3fG4"
)

// TestPlayVerify covers every check of Play.Verify with generated keys.
func TestPlayVerify(t *testing.T) {
	t.Parallel()
	keys := attestationtest.NewPlayKeys(t)
	strangers := attestationtest.NewPlayKeys(t)
	dec, ver, err := attestation.ParsePlayKeys(keys.DecB64, keys.VerB64)
	if err != nil {
		t.Fatal(err)
	}
	play := &attestation.Play{PackageName: testPackage, DecryptionKey: dec, VerificationKey: ver, MaxAge: 5 * time.Minute}
	strong := *play
	strong.RequireStrong = true

	with := func(change func(p map[string]any)) map[string]any {
		p := attestationtest.PlayPayload(testPackage, testNonce, genNow.Add(-30*time.Second))
		if change != nil {
			change(p)
		}
		return p
	}
	req := func(p map[string]any) map[string]any { return p["requestDetails"].(map[string]any) }
	device := func(labels ...string) func(p map[string]any) {
		return func(p map[string]any) { p["deviceIntegrity"] = map[string]any{"deviceRecognitionVerdict": labels} }
	}

	for _, c := range []struct {
		name     string
		play     *attestation.Play
		token    func() string
		nonce    string
		wantStep string
		wantErr  string
	}{
		{name: "valid", token: func() string { return keys.Token(t, with(nil)) }},
		{name: "valid with timestampMillis as a number", token: func() string {
			return keys.Token(t, with(func(p map[string]any) { req(p)["timestampMillis"] = genNow.UnixMilli() }))
		}},
		{name: "valid strong", play: &strong, token: func() string {
			return keys.Token(t, with(device(attestation.MeetsDeviceIntegrity, attestation.MeetsStrongIntegrity)))
		}},
		{name: "wrong package", token: func() string {
			return keys.Token(t, with(func(p map[string]any) { req(p)["requestPackageName"] = "com.evil.app" }))
		}, wantStep: attestation.StepPackageName, wantErr: "com.evil.app"},
		{name: "wrong app package", token: func() string {
			return keys.Token(t, with(func(p map[string]any) { p["appIntegrity"].(map[string]any)["packageName"] = "com.evil.app" }))
		}, wantStep: attestation.StepPackageName},
		{name: "wrong nonce", token: func() string { return keys.Token(t, with(nil)) }, nonce: "another-challenge", wantStep: attestation.StepNonce},
		{name: "expired timestamp", token: func() string {
			return keys.Token(t, with(func(p map[string]any) {
				req(p)["timestampMillis"] = strconv.FormatInt(genNow.Add(-5*time.Minute-time.Second).UnixMilli(), 10)
			}))
		}, wantStep: attestation.StepTimestamp, wantErr: "more than max_age 5m0s"},
		{name: "timestamp in the future", token: func() string {
			return keys.Token(t, with(func(p map[string]any) { req(p)["timestampMillis"] = genNow.Add(2 * time.Minute).UnixMilli() }))
		}, wantStep: attestation.StepTimestamp, wantErr: "in the future"},
		{name: "timestamp missing", token: func() string {
			return keys.Token(t, with(func(p map[string]any) { delete(req(p), "timestampMillis") }))
		}, wantStep: attestation.StepTimestamp, wantErr: "missing"},
		{name: "timestamp not a number", token: func() string {
			return keys.Token(t, with(func(p map[string]any) { req(p)["timestampMillis"] = "soon" }))
		}, wantStep: attestation.StepTimestamp},
		{name: "not PLAY_RECOGNIZED", token: func() string {
			return keys.Token(t, with(func(p map[string]any) {
				p["appIntegrity"] = map[string]any{"appRecognitionVerdict": "UNRECOGNIZED_VERSION"}
			}))
		}, wantStep: attestation.StepAppVerdict, wantErr: "UNRECOGNIZED_VERSION"},
		{name: "no device integrity", token: func() string { return keys.Token(t, with(device())) }, wantStep: attestation.StepDeviceVerdict},
		{name: "basic integrity only", token: func() string { return keys.Token(t, with(device("MEETS_BASIC_INTEGRITY"))) }, wantStep: attestation.StepDeviceVerdict},
		{name: "strong required but only device", play: &strong, token: func() string { return keys.Token(t, with(nil)) },
			wantStep: attestation.StepDeviceVerdict, wantErr: "MEETS_STRONG_INTEGRITY (required)"},
		{name: "signed by another key", token: func() string { return keys.TokenSignedBy(t, with(nil), strangers.Signing) }, wantStep: attestation.StepVerifySignature},
		{name: "encrypted with another key", token: func() string { return strangers.Token(t, with(nil)) }, wantStep: attestation.StepDecrypt},
		{name: "undecryptable garbage", token: func() string { return "eyJhbGciOiJBMjU2S1cifQ.a.b.c.d" }, wantStep: attestation.StepDecrypt},
		{name: "not a JWE", token: func() string { return "hello" }, wantStep: attestation.StepDecrypt},
		{name: "payload not JSON", token: func() string { return keys.Token(t, []byte("not json")) }, wantStep: attestation.StepDecode},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := play
			if c.play != nil {
				p = c.play
			}
			nonce := testNonce
			if c.nonce != "" {
				nonce = c.nonce
			}
			v, err := p.Verify(c.token(), nonce, genNow)
			if c.wantStep == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				if v.PackageName != testPackage || v.Nonce != testNonce || v.AppRecognitionVerdict != attestation.PlayRecognized ||
					len(v.DeviceRecognitionVerdict) == 0 || v.AppLicensingVerdict != "LICENSED" || v.Timestamp.IsZero() {
					t.Fatalf("verdict = %+v", v)
				}
				return
			}
			var e *attestation.Error
			if !errors.As(err, &e) || e.Step != c.wantStep || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("err = %v, want step %q containing %q", err, c.wantStep, c.wantErr)
			}
		})
	}
}

// TestParsePlayKeys checks the key formats of the Play Console.
func TestParsePlayKeys(t *testing.T) {
	t.Parallel()
	keys := attestationtest.NewPlayKeys(t)
	rsaLike, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	p384, _ := x509.MarshalPKIXPublicKey(&rsaLike.PublicKey)
	for _, c := range []struct {
		name, dec, ver, wantErr string
	}{
		{"valid", keys.DecB64, keys.VerB64, ""},
		{"valid url-safe unpadded with white space", " " + base64.RawURLEncoding.EncodeToString(keys.Decryption) + "\n", keys.VerB64, ""},
		{"decryption not base64", "!!!", keys.VerB64, "decryption key: not base64"},
		{"decryption 16 bytes", base64.StdEncoding.EncodeToString(make([]byte, 16)), keys.VerB64, "16 bytes, want 32"},
		{"verification not DER", keys.DecB64, base64.StdEncoding.EncodeToString([]byte("nope")), "verification key"},
		{"verification P-384", keys.DecB64, base64.StdEncoding.EncodeToString(p384), "not an EC P-256 key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dec, ver, err := attestation.ParsePlayKeys(c.dec, c.ver)
			if c.wantErr == "" {
				if err != nil || len(dec) != 32 || !ver.Equal(&keys.Signing.PublicKey) {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("err = %v, want %q", err, c.wantErr)
			}
			if strings.Contains(err.Error(), c.dec) && c.dec != "!!!" {
				t.Fatalf("err %q leaks the key", err)
			}
		})
	}
	for _, bad := range []*attestation.Play{nil, {}, {PackageName: "x"}, {PackageName: "x", DecryptionKey: make([]byte, 32)}} {
		if _, err := bad.Verify("t", "n", genNow); !errors.Is(err, attestation.ErrNotConfigured) {
			t.Errorf("%+v: err = %v, want ErrNotConfigured", bad, err)
		}
	}
}
