// Package attestationtest builds attestation inputs for tests: a private
// App Attest PKI (root, intermediate, leaf with Apple's nonce extension)
// that issues attestation objects and assertions, and Play Integrity keys
// that issue tokens. Every object is valid unless an Options field says
// otherwise, so a test changes one thing and expects one failed step.
// Never use it outside tests: the keys are generated on the spot.
package attestationtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math/big"
	"strconv"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/go-jose/go-jose/v4"

	"github.com/tollgate-dev/tollgate/attestation"
)

// AAGUIDs of App Attest.
var (
	// AAGUIDProduction is "appattest" followed by seven zero bytes.
	AAGUIDProduction = []byte("appattest\x00\x00\x00\x00\x00\x00\x00")
	// AAGUIDDevelopment is "appattestdevelop".
	AAGUIDDevelopment = []byte("appattestdevelop")
)

// CA is a generated App Attest PKI: a root and an intermediate that
// issues leaves. Pool holds the root, for attestation.Apple.Roots.
type CA struct {
	// Root and RootKey are the self-signed root (P-384).
	Root    *x509.Certificate
	RootKey *ecdsa.PrivateKey
	// Intermediate and IntermediateKey issue the leaves (P-384).
	Intermediate    *x509.Certificate
	IntermediateKey *ecdsa.PrivateKey
	// Pool holds Root only.
	Pool *x509.CertPool
	now  time.Time
}

// NewCA returns a PKI whose root and intermediate are valid from a year
// before now to ten years after.
func NewCA(t testing.TB, now time.Time) *CA {
	t.Helper()
	ca := &CA{now: now}
	ca.RootKey = newKey(t, elliptic.P384())
	rootTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "Test App Attestation Root CA", Organization: []string{"Tollgate Test"}},
		NotBefore:             now.AddDate(-1, 0, 0),
		NotAfter:              now.AddDate(10, 0, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	ca.Root = create(t, rootTmpl, rootTmpl, &ca.RootKey.PublicKey, ca.RootKey)
	ca.IntermediateKey = newKey(t, elliptic.P384())
	interTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(2),
		Subject:               pkix.Name{CommonName: "Test App Attestation CA 1", Organization: []string{"Tollgate Test"}},
		NotBefore:             now.AddDate(-1, 0, 0),
		NotAfter:              now.AddDate(10, 0, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	ca.Intermediate = create(t, interTmpl, ca.Root, &ca.IntermediateKey.PublicKey, ca.RootKey)
	ca.Pool = x509.NewCertPool()
	ca.Pool.AddCert(ca.Root)
	return ca
}

// Apple returns a verifier for appID and environment trusting the CA's root.
func (ca *CA) Apple(appID, environment string) *attestation.Apple {
	return &attestation.Apple{AppID: appID, Environment: environment, Roots: ca.Pool}
}

// Options shape an attestation object. The zero value of each field means
// the valid choice.
type Options struct {
	// AppID is the app id hashed into rpIdHash (required).
	AppID string
	// ClientDataHash is what the app passed to attestKey (required).
	ClientDataHash []byte
	// Key is the attested key (default: a new P-256 key).
	Key *ecdsa.PrivateKey
	// Counter is authData's counter (valid: 0).
	Counter uint32
	// AAGUID defaults to AAGUIDProduction.
	AAGUID []byte
	// Nonce overrides the leaf's nonce extension (default: the right one).
	Nonce []byte
	// CredentialID overrides authData's credential id (default: the key id).
	CredentialID []byte
	// NotBefore and NotAfter bound the leaf (default: an hour before the
	// CA's now to three days after).
	NotBefore, NotAfter time.Time
	// Fmt overrides the object's fmt (default "apple-appattest").
	Fmt string
	// Trailing is appended after authData's COSE key, as real devices may.
	Trailing []byte
}

// Attested is a generated attestation: the object the app would send, its
// key id and the key itself (to sign assertions).
type Attested struct {
	// Object is the CBOR attestation object.
	Object []byte
	// KeyID is SHA-256 of the key's uncompressed point (raw bytes).
	KeyID []byte
	// Key is the attested key; it signs assertions (Assertion).
	Key *ecdsa.PrivateKey
	// Leaf is the leaf certificate in Object's x5c.
	Leaf *x509.Certificate
}

// Attest issues a leaf for o.Key and returns the attestation object.
func (ca *CA) Attest(t testing.TB, o Options) *Attested {
	t.Helper()
	key := o.Key
	if key == nil {
		key = newKey(t, elliptic.P256())
	}
	point, err := key.PublicKey.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	keyID := sha256.Sum256(point)
	aaguid := o.AAGUID
	if aaguid == nil {
		aaguid = AAGUIDProduction
	}
	credID := o.CredentialID
	if credID == nil {
		credID = keyID[:]
	}
	cose, err := cbor.Marshal(map[int]any{1: 2, 3: -7, -1: 1, -2: point[1:33], -3: point[33:]})
	if err != nil {
		t.Fatal(err)
	}
	rp := sha256.Sum256([]byte(o.AppID))
	ad := append([]byte(nil), rp[:]...)
	ad = append(ad, 0x40)
	ad = binary.BigEndian.AppendUint32(ad, o.Counter)
	ad = append(ad, aaguid...)
	ad = binary.BigEndian.AppendUint16(ad, uint16(len(credID)))
	ad = append(ad, credID...)
	ad = append(ad, cose...)
	ad = append(ad, o.Trailing...)

	nonce := o.Nonce
	if nonce == nil {
		h := sha256.New()
		h.Write(ad)
		h.Write(o.ClientDataHash)
		nonce = h.Sum(nil)
	}
	ext, err := asn1.Marshal(struct {
		Nonce []byte `asn1:"tag:1,explicit"`
	}{nonce})
	if err != nil {
		t.Fatal(err)
	}
	nb, na := o.NotBefore, o.NotAfter
	if nb.IsZero() {
		nb = ca.now.Add(-time.Hour)
	}
	if na.IsZero() {
		na = ca.now.Add(72 * time.Hour)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: base64.RawURLEncoding.EncodeToString(keyID[:]), OrganizationalUnit: []string{"AAA Certification"}},
		NotBefore:    nb,
		NotAfter:     na,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		// Apple's newer leaves carry their own EKU; the verifier must accept it.
		UnknownExtKeyUsage: []asn1.ObjectIdentifier{{1, 2, 840, 113635, 100, 4, 24}},
		ExtraExtensions:    []pkix.Extension{{Id: attestation.OIDAppleNonce, Value: ext}},
	}
	leaf := create(t, leafTmpl, ca.Intermediate, &key.PublicKey, ca.IntermediateKey)
	format := o.Fmt
	if format == "" {
		format = attestation.AppleFormat
	}
	obj, err := cbor.Marshal(map[string]any{
		"fmt":      format,
		"attStmt":  map[string]any{"x5c": [][]byte{leaf.Raw, ca.Intermediate.Raw}, "receipt": []byte("test receipt")},
		"authData": ad,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &Attested{Object: obj, KeyID: keyID[:], Key: key, Leaf: leaf}
}

// Assertion returns an App Attest assertion by key over clientData for
// appID with counter.
func Assertion(t testing.TB, key *ecdsa.PrivateKey, appID string, counter uint32, clientData []byte) []byte {
	t.Helper()
	rp := sha256.Sum256([]byte(appID))
	ad := append([]byte(nil), rp[:]...)
	ad = append(ad, 0x40)
	ad = binary.BigEndian.AppendUint32(ad, counter)
	cd := sha256.Sum256(clientData)
	h := sha256.New()
	h.Write(ad)
	h.Write(cd[:])
	nonce := h.Sum(nil)
	digest := sha256.Sum256(nonce)
	sig, err := ecdsa.SignASN1(rand.Reader, key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	b, err := cbor.Marshal(map[string]any{"signature": sig, "authenticatorData": ad})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// PlayKeys are generated Play Integrity keys: the AES key Play would
// encrypt with and the EC key it would sign with, plus their base64 forms
// as the Play Console shows them (for attestation.ParsePlayKeys).
type PlayKeys struct {
	// Decryption is the raw 32-byte AES key (A256KW).
	Decryption []byte
	// Signing is the EC P-256 key tokens are signed with (ES256).
	Signing *ecdsa.PrivateKey
	// DecB64 and VerB64 are the decryption key and the verification
	// (public) key's DER SubjectPublicKeyInfo, in standard base64.
	DecB64 string
	VerB64 string
}

// NewPlayKeys generates Play Integrity keys.
func NewPlayKeys(t testing.TB) *PlayKeys {
	t.Helper()
	k := &PlayKeys{Decryption: make([]byte, 32), Signing: newKey(t, elliptic.P256())}
	if _, err := rand.Read(k.Decryption); err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.Signing.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	k.DecB64 = base64.StdEncoding.EncodeToString(k.Decryption)
	k.VerB64 = base64.StdEncoding.EncodeToString(der)
	return k
}

// Play returns a verifier for packageName with these keys.
func (k *PlayKeys) Play(packageName string) *attestation.Play {
	return &attestation.Play{PackageName: packageName, DecryptionKey: k.Decryption, VerificationKey: &k.Signing.PublicKey}
}

// Token signs payload (marshalled to JSON unless it is []byte) as a
// compact JWS (ES256) and encrypts that as a compact JWE (A256KW,
// A256GCM), as Play does.
func (k *PlayKeys) Token(t testing.TB, payload any) string {
	t.Helper()
	return k.TokenSignedBy(t, payload, k.Signing)
}

// TokenSignedBy is Token with another signing key.
func (k *PlayKeys) TokenSignedBy(t testing.TB, payload any, signer *ecdsa.PrivateKey) string {
	t.Helper()
	body, ok := payload.([]byte)
	if !ok {
		var err error
		if body, err = json.Marshal(payload); err != nil {
			t.Fatal(err)
		}
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: signer}, nil)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := s.Sign(body)
	if err != nil {
		t.Fatal(err)
	}
	compact, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	e, err := jose.NewEncrypter(jose.A256GCM, jose.Recipient{Algorithm: jose.A256KW, Key: k.Decryption}, nil)
	if err != nil {
		t.Fatal(err)
	}
	jwe, err := e.Encrypt([]byte(compact))
	if err != nil {
		t.Fatal(err)
	}
	out, err := jwe.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// PlayPayload returns a passing Play Integrity payload for packageName and
// nonce issued at ts (timestampMillis as a JSON string, as Play sends it),
// as a map a test may change before calling Token.
func PlayPayload(packageName, nonce string, ts time.Time) map[string]any {
	return map[string]any{
		"requestDetails": map[string]any{
			"requestPackageName": packageName,
			"nonce":              nonce,
			"timestampMillis":    strconv.FormatInt(ts.UnixMilli(), 10),
		},
		"appIntegrity": map[string]any{
			"appRecognitionVerdict":   attestation.PlayRecognized,
			"packageName":             packageName,
			"certificateSha256Digest": []string{"6a6a1474b5cbbb2b1aa57e0bc3"},
			"versionCode":             "42",
		},
		"deviceIntegrity": map[string]any{
			"deviceRecognitionVerdict": []string{attestation.MeetsDeviceIntegrity},
		},
		"accountDetails": map[string]any{"appLicensingVerdict": "LICENSED"},
	}
}

func newKey(t testing.TB, c elliptic.Curve) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func create(t testing.TB, tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey) *x509.Certificate {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
