package attestation

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/fxamacker/cbor/v2"
)

// Environments of an Apple verifier.
const (
	// EnvironmentProduction expects the aaguid "appattest" followed by
	// seven zero bytes (apps signed for distribution).
	EnvironmentProduction = "production"
	// EnvironmentDevelopment expects the aaguid "appattestdevelop" (apps
	// with the development App Attest entitlement).
	EnvironmentDevelopment = "development"
)

// AppleFormat is the fmt of an App Attest attestation object.
const AppleFormat = "apple-appattest"

// OIDAppleNonce is the leaf certificate extension holding the nonce:
// SEQUENCE { [1] EXPLICIT OCTET STRING }.
var OIDAppleNonce = asn1.ObjectIdentifier{1, 2, 840, 113635, 100, 8, 2}

var (
	aaguidDevelopment = []byte("appattestdevelop")
	aaguidProduction  = []byte("appattest\x00\x00\x00\x00\x00\x00\x00")
)

// Bounds on what the parsers accept.
const (
	// maxChain bounds the certificates of x5c.
	maxChain = 4
	// maxObject bounds an attestation object or assertion, in bytes.
	maxObject = 32 << 10
)

// authData flags.
const (
	flagAttested   = 0x40
	flagExtensions = 0x80
)

// decMode decodes every CBOR input: duplicate map keys are refused and
// nesting, arrays and maps are bounded, so hostile input costs little.
var decMode = func() cbor.DecMode {
	dm, err := cbor.DecOptions{
		DupMapKey:        cbor.DupMapKeyEnforcedAPF,
		MaxNestedLevels:  16,
		MaxArrayElements: 64,
		MaxMapPairs:      64,
	}.DecMode()
	if err != nil {
		panic("attestation: cbor options: " + err.Error()) // constant options; cannot fail
	}
	return dm
}()

// Apple verifies App Attest attestations and assertions of one app. Its
// fields are read-only once in use; it is then safe for concurrent use.
type Apple struct {
	// AppID is the app's "TEAMID.bundle.id"; its SHA-256 is the rpIdHash.
	AppID string
	// Environment is EnvironmentProduction ("" means production) or
	// EnvironmentDevelopment; it selects the expected aaguid.
	Environment string
	// Roots holds Apple's App Attestation root CA (LoadAppleRoot).
	Roots *x509.CertPool

	// inter is the intermediate CA that last chained to Roots (Apple's
	// one, in practice), kept so that the next chains through it cost
	// one signature instead of two (verifyChain). An Apple is not to be
	// copied once in use.
	inter atomic.Pointer[verifiedInter]
}

// verifiedInter is an intermediate CA verified to chain to the roots at
// checked, trusted as an anchor until until: at most interRecheck later,
// and never past its own end.
type verifiedInter struct {
	der            []byte
	pool           *x509.CertPool
	checked, until time.Time
}

// interRecheck is how long an intermediate that chained to the roots is
// trusted as an anchor before its chain is verified again.
const interRecheck = time.Hour

// Validate reports a missing AppID or Roots or an unknown Environment,
// wrapping ErrNotConfigured.
func (a *Apple) Validate() error {
	switch {
	case a == nil:
		return fmt.Errorf("%w: apple: nil", ErrNotConfigured)
	case a.AppID == "":
		return fmt.Errorf("%w: apple: app id is empty", ErrNotConfigured)
	case a.Roots == nil:
		return fmt.Errorf("%w: apple: no root CA", ErrNotConfigured)
	case a.Environment != "" && a.Environment != EnvironmentProduction && a.Environment != EnvironmentDevelopment:
		return fmt.Errorf("%w: apple: environment %q is not production or development", ErrNotConfigured, a.Environment)
	}
	return nil
}

// LoadAppleRoot reads Apple's App Attestation root CA (PEM, or a single DER
// certificate) from path and returns a pool holding it. Every certificate
// in the file must be a CA.
func LoadAppleRoot(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("attestation: apple root CA: %w", err)
	}
	var certs []*x509.Certificate
	rest := b
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("attestation: apple root CA %s: %w", path, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		c, err := x509.ParseCertificate(b)
		if err != nil {
			return nil, fmt.Errorf("attestation: apple root CA %s: no PEM certificate and not a DER certificate: %w", path, err)
		}
		certs = append(certs, c)
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		if !c.IsCA {
			return nil, fmt.Errorf("attestation: apple root CA %s: certificate %q is not a CA", path, c.Subject.CommonName)
		}
		pool.AddCert(c)
	}
	return pool, nil
}

// AppleKey is an attested App Attest key.
type AppleKey struct {
	// KeyID is the key identifier: SHA-256 of the uncompressed public key.
	KeyID []byte
	// PublicKey is the attested P-256 key; assertions are signed with it.
	PublicKey *ecdsa.PublicKey
	// Counter is the sign counter at attestation (always 0).
	Counter uint32
	// Receipt is Apple's receipt from attStmt, for the fraud-metric service.
	Receipt []byte
}

// attestationObject is the CBOR attestation object.
type attestationObject struct {
	Fmt      string  `cbor:"fmt"`
	AttStmt  attStmt `cbor:"attStmt"`
	AuthData []byte  `cbor:"authData"`
}

type attStmt struct {
	X5C     [][]byte `cbor:"x5c"`
	Receipt []byte   `cbor:"receipt"`
}

// authData is a parsed authenticator data.
type authData struct {
	rpIDHash []byte
	flags    byte
	counter  uint32
	// Attested credential data (flagAttested set).
	aaguid       []byte
	credentialID []byte
	coseKey      coseKey
}

// coseKey is an EC2 COSE_Key.
type coseKey struct {
	Kty int64  `cbor:"1,keyasint"`
	Alg int64  `cbor:"3,keyasint"`
	Crv int64  `cbor:"-1,keyasint"`
	X   []byte `cbor:"-2,keyasint"`
	Y   []byte `cbor:"-3,keyasint"`
}

// parseAuthData parses authenticator data. With attested, the attested
// credential data is required and parsed: aaguid, credential id and the
// COSE key, of which only the first CBOR item is read (real devices may
// append data after it). Without, only the first 37 bytes are read.
func parseAuthData(b []byte, attested bool) (*authData, error) {
	if len(b) < 37 {
		return nil, fmt.Errorf("authenticator data is %d bytes, want at least 37", len(b))
	}
	ad := &authData{rpIDHash: b[:32], flags: b[32], counter: binary.BigEndian.Uint32(b[33:37])}
	if !attested {
		return ad, nil
	}
	if ad.flags&flagAttested == 0 {
		return nil, fmt.Errorf("authenticator data flags 0x%02x lack attested credential data (0x40)", ad.flags)
	}
	rest := b[37:]
	if len(rest) < 18 {
		return nil, errors.New("authenticator data is truncated in the attested credential data")
	}
	ad.aaguid = rest[:16]
	n := int(binary.BigEndian.Uint16(rest[16:18]))
	rest = rest[18:]
	if n > len(rest) {
		return nil, fmt.Errorf("credential id length %d exceeds the %d bytes left", n, len(rest))
	}
	ad.credentialID = rest[:n]
	rest = rest[n:]
	if len(rest) == 0 {
		return nil, errors.New("authenticator data has no credential public key")
	}
	if _, err := decMode.UnmarshalFirst(rest, &ad.coseKey); err != nil {
		return nil, fmt.Errorf("credential public key: %w", err)
	}
	return ad, nil
}

// VerifyAttestation verifies an App Attest attestation object for keyID
// (the raw key identifier) and clientDataHash (what the app passed to
// attestKey: the API uses SHA-256 of the challenge string), at now. It
// follows Apple's steps in order and returns an *Error naming the first
// that fails:
//
//  1. decode and format: CBOR with fmt "apple-appattest", x5c, authData;
//  2. certificate chain: x5c verifies to Roots at now;
//  3. nonce: SHA-256(authData || clientDataHash) equals the leaf's
//     extension 1.2.840.113635.100.8.2;
//  4. key id: SHA-256 of the leaf's uncompressed P-256 key equals keyID
//     (public key: authData's COSE key is that same key);
//  5. rp id: authData's rpIdHash equals SHA-256(AppID);
//  6. counter: 0;
//  7. aaguid: "appattestdevelop" or "appattest" + 7 zero bytes, per Environment;
//  8. credential id: equals keyID.
func (a *Apple) VerifyAttestation(attObj, keyID, clientDataHash []byte, now time.Time) (*AppleKey, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	obj, ad, err := decodeAttestation(attObj)
	if err != nil {
		return nil, err
	}
	leaf, err := a.verifyChain(obj.AttStmt.X5C, now)
	if err != nil {
		return nil, err
	}
	if err := checkNonce(leaf, obj.AuthData, clientDataHash); err != nil {
		return nil, err
	}
	pub, err := checkLeafKey(leaf, keyID, ad)
	if err != nil {
		return nil, err
	}
	if err := a.checkAuthData(ad, keyID); err != nil {
		return nil, err
	}
	return &AppleKey{KeyID: bytes.Clone(keyID), PublicKey: pub, Counter: ad.counter, Receipt: obj.AttStmt.Receipt}, nil
}

// decodeAttestation decodes the CBOR attestation object and its authData
// and checks its format (steps decode and format).
func decodeAttestation(attObj []byte) (*attestationObject, *authData, error) {
	if len(attObj) > maxObject {
		return nil, nil, fail(StepDecode, fmt.Sprintf("attestation object is %d bytes, at most %d", len(attObj), maxObject))
	}
	var obj attestationObject
	if err := decMode.Unmarshal(attObj, &obj); err != nil {
		return nil, nil, failErr(StepDecode, fmt.Errorf("attestation object is not valid CBOR: %w", err))
	}
	if obj.Fmt != AppleFormat {
		return nil, nil, fail(StepFormat, fmt.Sprintf("fmt is %q, want %q", clipText(obj.Fmt), AppleFormat))
	}
	if len(obj.AttStmt.X5C) == 0 {
		return nil, nil, fail(StepFormat, "attStmt has no x5c certificates")
	}
	if len(obj.AttStmt.X5C) > maxChain {
		return nil, nil, fail(StepFormat, fmt.Sprintf("attStmt has %d x5c certificates, at most %d", len(obj.AttStmt.X5C), maxChain))
	}
	ad, err := parseAuthData(obj.AuthData, true)
	if err != nil {
		return nil, nil, failErr(StepDecode, err)
	}
	return &obj, ad, nil
}

// verifyChain parses x5c and verifies its leaf to a.Roots at now (step 1),
// returning the leaf.
func (a *Apple) verifyChain(x5c [][]byte, now time.Time) (*x509.Certificate, error) {
	leaf, err := x509.ParseCertificate(x5c[0])
	if err != nil {
		return nil, failErr(StepCertificateChain, fmt.Errorf("leaf certificate: %w", err))
	}
	if c := a.inter.Load(); c != nil && len(x5c) == 2 && bytes.Equal(x5c[1], c.der) && !now.Before(c.checked) && now.Before(c.until) {
		// the intermediate chained to the roots within interRecheck:
		// the leaf's signature by it is what is left to verify
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: c.pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			return nil, failErr(StepCertificateChain, err)
		}
		return leaf, nil
	}
	inter := x509.NewCertPool()
	for i, der := range x5c[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, failErr(StepCertificateChain, fmt.Errorf("certificate %d of x5c: %w", i+1, err))
		}
		inter.AddCert(c)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{
		Roots:         a.Roots,
		Intermediates: inter,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	if err != nil {
		return nil, failErr(StepCertificateChain, err)
	}
	a.keepInter(chains, now)
	return leaf, nil
}

// keepInter keeps the intermediate of chains, when one of them is leaf,
// intermediate, root, as the anchor of the next chains (verifyChain).
func (a *Apple) keepInter(chains [][]*x509.Certificate, now time.Time) {
	for _, ch := range chains {
		if len(ch) != 3 {
			continue
		}
		c := ch[1]
		pool := x509.NewCertPool()
		pool.AddCert(c)
		a.inter.Store(&verifiedInter{der: c.Raw, pool: pool, checked: now, until: minTime(now.Add(interRecheck), c.NotAfter)})
		return
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// checkNonce checks that SHA-256(authData || clientDataHash) is the leaf's
// nonce extension (steps 2-4).
func checkNonce(leaf *x509.Certificate, authData, clientDataHash []byte) error {
	h := sha256.New()
	h.Write(authData)
	h.Write(clientDataHash)
	nonce := h.Sum(nil)
	certNonce, err := leafNonce(leaf)
	if err != nil {
		return failErr(StepNonce, err)
	}
	if !bytes.Equal(nonce, certNonce) {
		return fail(StepNonce, "does not match the certificate's nonce extension")
	}
	return nil
}

// checkLeafKey checks that the leaf's P-256 key hashes to keyID and is the
// COSE key of authData (step 5), returning it.
func checkLeafKey(leaf *x509.Certificate, keyID []byte, ad *authData) (*ecdsa.PublicKey, error) {
	pub, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		return nil, fail(StepPublicKey, "the leaf certificate's key is not an ECDSA P-256 key")
	}
	point, err := pub.Bytes()
	if err != nil {
		return nil, failErr(StepPublicKey, err)
	}
	sum := sha256.Sum256(point)
	if !bytes.Equal(sum[:], keyID) {
		return nil, fail(StepKeyID, "SHA-256 of the certificate's public key is not the key id")
	}
	if err := checkCOSEKey(&ad.coseKey, point); err != nil {
		return nil, failErr(StepPublicKey, err)
	}
	return pub, nil
}

// checkAuthData checks authData's rpIdHash, counter, aaguid and credential
// id (steps 6-9).
func (a *Apple) checkAuthData(ad *authData, keyID []byte) error {
	app := sha256.Sum256([]byte(a.AppID))
	if !bytes.Equal(ad.rpIDHash, app[:]) {
		return fail(StepRPID, fmt.Sprintf("rpIdHash is not SHA-256 of the app id %q", a.AppID))
	}
	if ad.counter != 0 {
		return fail(StepCounter, fmt.Sprintf("is %d, want 0 in an attestation", ad.counter))
	}
	want := aaguidProduction
	if a.Environment == EnvironmentDevelopment {
		want = aaguidDevelopment
	}
	if !bytes.Equal(ad.aaguid, want) {
		return fail(StepAAGUID, fmt.Sprintf("is %q, want %q for environment %s", printable(ad.aaguid), printable(want), a.env()))
	}
	if !bytes.Equal(ad.credentialID, keyID) {
		return fail(StepCredentialID, "is not the key id")
	}
	return nil
}

func (a *Apple) env() string {
	if a.Environment == "" {
		return EnvironmentProduction
	}
	return a.Environment
}

// leafNonce extracts the nonce extension of the leaf certificate.
func leafNonce(leaf *x509.Certificate) ([]byte, error) {
	for _, ext := range leaf.Extensions {
		if !ext.Id.Equal(OIDAppleNonce) {
			continue
		}
		var seq struct {
			Nonce []byte `asn1:"tag:1,explicit"`
		}
		rest, err := asn1.Unmarshal(ext.Value, &seq)
		if err != nil {
			return nil, fmt.Errorf("the certificate's nonce extension is malformed: %w", err)
		}
		if len(rest) != 0 || len(seq.Nonce) != sha256.Size {
			return nil, fmt.Errorf("the certificate's nonce extension holds %d bytes, want %d", len(seq.Nonce), sha256.Size)
		}
		return seq.Nonce, nil
	}
	return nil, errors.New("the certificate has no nonce extension (1.2.840.113635.100.8.2)")
}

// checkCOSEKey checks that authData's credential public key is the P-256
// key whose uncompressed point is point.
func checkCOSEKey(k *coseKey, point []byte) error {
	if k.Kty != 2 || k.Crv != 1 || (k.Alg != 0 && k.Alg != -7) {
		return fmt.Errorf("authData's credential key is not an ES256 P-256 key (kty %d, crv %d, alg %d)", k.Kty, k.Crv, k.Alg)
	}
	if len(k.X) != 32 || len(k.Y) != 32 || !bytes.Equal(point[1:33], k.X) || !bytes.Equal(point[33:], k.Y) {
		return errors.New("authData's credential key is not the certificate's key")
	}
	return nil
}

// assertionObject is the CBOR assertion.
type assertionObject struct {
	Signature         []byte `cbor:"signature"`
	AuthenticatorData []byte `cbor:"authenticatorData"`
}

// VerifyAssertion verifies an App Attest assertion over clientData (the
// exact bytes the app passed to generateAssertion, which hashed them) with
// the attested key, and returns the assertion's counter. Checks, in
// Apple's order: decode (CBOR {signature, authenticatorData});
// signature: DER ECDSA over SHA-256(nonce), nonce = SHA-256(authenticatorData
// || SHA-256(clientData)); rp id: rpIdHash is SHA-256(AppID); counter:
// strictly greater than prevCounter. A caller must then store the counter
// atomically (Devices.Advance) so a replay cannot pass twice.
func (a *Apple) VerifyAssertion(assertion, clientData []byte, key *ecdsa.PublicKey, prevCounter uint32) (counter uint32, err error) {
	if a == nil || a.AppID == "" {
		return 0, fmt.Errorf("%w: apple: app id is empty", ErrNotConfigured)
	}
	if key == nil {
		return 0, fail(StepPublicKey, "no attested key")
	}
	if len(assertion) > maxObject {
		return 0, fail(StepDecode, fmt.Sprintf("assertion is %d bytes, at most %d", len(assertion), maxObject))
	}
	var obj assertionObject
	if err := decMode.Unmarshal(assertion, &obj); err != nil {
		return 0, failErr(StepDecode, fmt.Errorf("assertion is not valid CBOR: %w", err))
	}
	if len(obj.Signature) == 0 {
		return 0, fail(StepDecode, "assertion has no signature")
	}
	ad, err := parseAuthData(obj.AuthenticatorData, false)
	if err != nil {
		return 0, failErr(StepDecode, err)
	}
	cd := sha256.Sum256(clientData)
	h := sha256.New()
	h.Write(obj.AuthenticatorData)
	h.Write(cd[:])
	nonce := h.Sum(nil)
	digest := sha256.Sum256(nonce)
	if !ecdsa.VerifyASN1(key, digest[:], obj.Signature) {
		return 0, fail(StepSignature, "does not verify with the attested key")
	}
	app := sha256.Sum256([]byte(a.AppID))
	if !bytes.Equal(ad.rpIDHash, app[:]) {
		return 0, fail(StepRPID, fmt.Sprintf("rpIdHash is not SHA-256 of the app id %q", a.AppID))
	}
	if ad.counter <= prevCounter {
		return 0, fail(StepCounter, fmt.Sprintf("%d is not greater than the last seen %d (replayed assertion?)", ad.counter, prevCounter))
	}
	return ad.counter, nil
}

// printable renders b for an error message: as text when printable
// (zero bytes shown as \x00), else hex.
func printable(b []byte) string {
	for _, c := range b {
		if c != 0 && (c < 0x20 || c > 0x7e) {
			return fmt.Sprintf("%x", b)
		}
	}
	return string(b)
}

// clipText shortens s for an error message.
func clipText(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
