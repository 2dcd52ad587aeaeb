package attestation

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// Play Integrity verdict values.
const (
	// PlayRecognized is the appRecognitionVerdict of a genuine app binary.
	PlayRecognized = "PLAY_RECOGNIZED"
	// MeetsDeviceIntegrity and MeetsStrongIntegrity are the
	// deviceRecognitionVerdict labels that pass.
	MeetsDeviceIntegrity = "MEETS_DEVICE_INTEGRITY"
	MeetsStrongIntegrity = "MEETS_STRONG_INTEGRITY"
)

// DefaultMaxAge is the oldest Play Integrity verdict accepted when
// Play.MaxAge is 0.
const DefaultMaxAge = 5 * time.Minute

// maxFuture is how far in the future a verdict's timestamp may be (clock skew).
const maxFuture = time.Minute

// maxToken bounds a Play Integrity token, in bytes.
const maxToken = 32 << 10

// Play verifies Google Play Integrity tokens of one app, locally (classic
// requests with keys managed in the Play Console). Its fields are read-only
// once in use; it is then safe for concurrent use.
type Play struct {
	// PackageName is the app's package name (com.example.app).
	PackageName string
	// DecryptionKey is the raw 32-byte AES key (A256KW) from the Play Console.
	DecryptionKey []byte
	// VerificationKey is the EC P-256 key (ES256) from the Play Console.
	VerificationKey *ecdsa.PublicKey
	// MaxAge bounds the verdict's age (0 means DefaultMaxAge).
	MaxAge time.Duration
	// RequireStrong demands MEETS_STRONG_INTEGRITY; otherwise
	// MEETS_DEVICE_INTEGRITY suffices.
	RequireStrong bool
}

// Validate reports a missing package name or key, wrapping ErrNotConfigured.
func (p *Play) Validate() error {
	switch {
	case p == nil:
		return fmt.Errorf("%w: play: nil", ErrNotConfigured)
	case p.PackageName == "":
		return fmt.Errorf("%w: play: package name is empty", ErrNotConfigured)
	case len(p.DecryptionKey) != 32:
		return fmt.Errorf("%w: play: decryption key is %d bytes, want 32", ErrNotConfigured, len(p.DecryptionKey))
	case p.VerificationKey == nil:
		return fmt.Errorf("%w: play: no verification key", ErrNotConfigured)
	case p.MaxAge < 0:
		return fmt.Errorf("%w: play: max age %v is negative", ErrNotConfigured, p.MaxAge)
	}
	return nil
}

// ParsePlayKeys decodes the two keys of the Play Console's response
// encryption page: decB64 is the base64 raw 32-byte AES decryption key,
// verB64 the base64 DER SubjectPublicKeyInfo of the EC P-256 verification
// key. Surrounding white space is ignored; errors never include the keys.
func ParsePlayKeys(decB64, verB64 string) (dec []byte, ver *ecdsa.PublicKey, err error) {
	if dec, err = ParsePlayDecryptionKey(decB64); err != nil {
		return nil, nil, err
	}
	if ver, err = ParsePlayVerificationKey(verB64); err != nil {
		return nil, nil, err
	}
	return dec, ver, nil
}

// ParsePlayDecryptionKey decodes the Play Integrity decryption key (base64
// of 32 bytes, AES-256).
func ParsePlayDecryptionKey(b64 string) ([]byte, error) {
	dec, err := decodeB64(b64)
	if err != nil {
		return nil, fmt.Errorf("attestation: play decryption key: not base64: %w", err)
	}
	if len(dec) != 32 {
		return nil, fmt.Errorf("attestation: play decryption key: %d bytes, want 32 (AES-256)", len(dec))
	}
	return dec, nil
}

// ParsePlayVerificationKey decodes the Play Integrity verification key
// (base64 of a DER EC P-256 public key).
func ParsePlayVerificationKey(b64 string) (*ecdsa.PublicKey, error) {
	der, err := decodeB64(b64)
	if err != nil {
		return nil, fmt.Errorf("attestation: play verification key: not base64: %w", err)
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("attestation: play verification key: %w", err)
	}
	ver, ok := k.(*ecdsa.PublicKey)
	if !ok || ver.Curve != elliptic.P256() {
		return nil, fmt.Errorf("attestation: play verification key: %T is not an EC P-256 key", k)
	}
	return ver, nil
}

// decodeB64 decodes standard or URL-safe base64, padded or not.
func decodeB64(s string) ([]byte, error) {
	s = strings.Join(strings.Fields(s), "")
	s = strings.TrimRight(s, "=")
	if strings.ContainsAny(s, "-_") {
		return base64.RawURLEncoding.DecodeString(s)
	}
	return base64.RawStdEncoding.DecodeString(s)
}

// PlayVerdict is the part of a Play Integrity payload a server acts on.
type PlayVerdict struct {
	// PackageName is requestDetails.requestPackageName.
	PackageName string
	// Nonce is requestDetails.nonce.
	Nonce string
	// Timestamp is requestDetails.timestampMillis.
	Timestamp time.Time
	// AppRecognitionVerdict is appIntegrity.appRecognitionVerdict.
	AppRecognitionVerdict string
	// CertificateSHA256Digest and VersionCode describe the app binary
	// (appIntegrity), when Play recognized it.
	CertificateSHA256Digest []string
	VersionCode             string
	// DeviceRecognitionVerdict is deviceIntegrity.deviceRecognitionVerdict.
	DeviceRecognitionVerdict []string
	// AppLicensingVerdict is accountDetails.appLicensingVerdict.
	AppLicensingVerdict string
}

// playPayload is the JSON payload of a Play Integrity token.
type playPayload struct {
	RequestDetails struct {
		RequestPackageName string          `json:"requestPackageName"`
		Nonce              string          `json:"nonce"`
		TimestampMillis    json.RawMessage `json:"timestampMillis"`
	} `json:"requestDetails"`
	AppIntegrity struct {
		AppRecognitionVerdict   string   `json:"appRecognitionVerdict"`
		PackageName             string   `json:"packageName"`
		CertificateSHA256Digest []string `json:"certificateSha256Digest"`
		VersionCode             string   `json:"versionCode"`
	} `json:"appIntegrity"`
	DeviceIntegrity struct {
		DeviceRecognitionVerdict []string `json:"deviceRecognitionVerdict"`
	} `json:"deviceIntegrity"`
	AccountDetails struct {
		AppLicensingVerdict string `json:"appLicensingVerdict"`
	} `json:"accountDetails"`
}

// Verify decrypts and verifies a Play Integrity token (compact JWE,
// A256KW + A256GCM, around a compact JWS, ES256) and checks its payload
// for nonce (the challenge string) at now. It returns an *Error naming the
// first check that fails: decrypt, verify signature, decode, package name
// (requestDetails.requestPackageName, and appIntegrity.packageName when
// present), nonce, timestamp (within MaxAge of now, at most a minute
// ahead), app verdict (PLAY_RECOGNIZED), device verdict
// (MEETS_DEVICE_INTEGRITY or MEETS_STRONG_INTEGRITY; only the latter with
// RequireStrong).
func (p *Play) Verify(token, nonce string, now time.Time) (*PlayVerdict, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	payload, err := p.open(token)
	if err != nil {
		return nil, err
	}
	var pl playPayload
	dec := json.NewDecoder(bytes.NewReader(payload))
	if err := dec.Decode(&pl); err != nil {
		return nil, failErr(StepDecode, fmt.Errorf("payload is not the expected JSON: %w", err))
	}
	rd := &pl.RequestDetails
	v := &PlayVerdict{
		PackageName:              rd.RequestPackageName,
		Nonce:                    rd.Nonce,
		AppRecognitionVerdict:    pl.AppIntegrity.AppRecognitionVerdict,
		CertificateSHA256Digest:  pl.AppIntegrity.CertificateSHA256Digest,
		VersionCode:              pl.AppIntegrity.VersionCode,
		DeviceRecognitionVerdict: pl.DeviceIntegrity.DeviceRecognitionVerdict,
		AppLicensingVerdict:      pl.AccountDetails.AppLicensingVerdict,
	}
	if rd.RequestPackageName != p.PackageName {
		return nil, fail(StepPackageName, fmt.Sprintf("requestPackageName is %q, want %q", clipText(rd.RequestPackageName), p.PackageName))
	}
	if pn := pl.AppIntegrity.PackageName; pn != "" && pn != p.PackageName {
		return nil, fail(StepPackageName, fmt.Sprintf("appIntegrity.packageName is %q, want %q", clipText(pn), p.PackageName))
	}
	if rd.Nonce != nonce || nonce == "" {
		return nil, fail(StepNonce, "requestDetails.nonce is not the challenge")
	}
	if err := p.checkTime(v, rd.TimestampMillis, now); err != nil {
		return nil, err
	}
	if err := p.checkVerdicts(v); err != nil {
		return nil, err
	}
	return v, nil
}

// open decrypts token (a compact JWE, A256KW and A256GCM) with the
// decryption key and verifies the JWS inside it (ES256) with the
// verification key, returning its payload.
func (p *Play) open(token string) ([]byte, error) {
	if len(token) > maxToken {
		return nil, fail(StepDecrypt, fmt.Sprintf("token is %d bytes, at most %d", len(token), maxToken))
	}
	jwe, err := jose.ParseEncryptedCompact(strings.TrimSpace(token), []jose.KeyAlgorithm{jose.A256KW}, []jose.ContentEncryption{jose.A256GCM})
	if err != nil {
		return nil, failErr(StepDecrypt, fmt.Errorf("not a compact JWE with A256KW and A256GCM: %w", err))
	}
	inner, err := jwe.Decrypt(p.DecryptionKey)
	if err != nil {
		return nil, failErr(StepDecrypt, fmt.Errorf("with the configured decryption key: %w", err))
	}
	jws, err := jose.ParseSignedCompact(string(inner), []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		return nil, failErr(StepVerifySignature, fmt.Errorf("not a compact JWS with ES256: %w", err))
	}
	payload, err := jws.Verify(p.VerificationKey)
	if err != nil {
		return nil, failErr(StepVerifySignature, fmt.Errorf("with the configured verification key: %w", err))
	}
	return payload, nil
}

// checkTime sets v's timestamp from millis and checks it is at most
// MaxAge old and not in the future (beyond maxFuture of clock skew).
func (p *Play) checkTime(v *PlayVerdict, millis json.RawMessage, now time.Time) error {
	ms, err := parseMillis(millis)
	if err != nil {
		return failErr(StepTimestamp, err)
	}
	v.Timestamp = time.UnixMilli(ms).UTC()
	maxAge := p.MaxAge
	if maxAge == 0 {
		maxAge = DefaultMaxAge
	}
	switch age := now.Sub(v.Timestamp); {
	case age > maxAge:
		return fail(StepTimestamp, fmt.Sprintf("the verdict is %v old, more than max_age %v", age.Round(time.Second), maxAge))
	case age < -maxFuture:
		return fail(StepTimestamp, fmt.Sprintf("the verdict is %v in the future", (-age).Round(time.Second)))
	}
	return nil
}

// checkVerdicts requires a recognized app on a device meeting device
// integrity, or strong integrity when RequireStrong.
func (p *Play) checkVerdicts(v *PlayVerdict) error {
	if v.AppRecognitionVerdict != PlayRecognized {
		return fail(StepAppVerdict, fmt.Sprintf("appRecognitionVerdict is %q, want %s", clipText(v.AppRecognitionVerdict), PlayRecognized))
	}
	strong := slices.Contains(v.DeviceRecognitionVerdict, MeetsStrongIntegrity)
	basic := slices.Contains(v.DeviceRecognitionVerdict, MeetsDeviceIntegrity)
	switch {
	case p.RequireStrong && !strong:
		return fail(StepDeviceVerdict, fmt.Sprintf("deviceRecognitionVerdict %v lacks %s (required)", v.DeviceRecognitionVerdict, MeetsStrongIntegrity))
	case !strong && !basic:
		return fail(StepDeviceVerdict, fmt.Sprintf("deviceRecognitionVerdict %v has neither %s nor %s", v.DeviceRecognitionVerdict, MeetsDeviceIntegrity, MeetsStrongIntegrity))
	}
	return nil
}

// parseMillis reads timestampMillis: a JSON string of digits (as Play
// sends it) or a JSON number.
func parseMillis(raw json.RawMessage) (int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, errors.New("requestDetails.timestampMillis is missing")
	}
	s := string(raw)
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, fmt.Errorf("requestDetails.timestampMillis: %w", err)
		}
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms <= 0 {
		return 0, fmt.Errorf("requestDetails.timestampMillis %q is not a positive whole number of milliseconds", clipText(s))
	}
	return ms, nil
}
