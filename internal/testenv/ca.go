package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority made for one test: it signs certificates
// for 127.0.0.1 and localhost, good for server and client use, so one CA
// serves TLS listeners, mTLS clients and the TLS servers tests start
// (nats-server, redis-server).
type CA struct {
	// Cert is the CA's certificate, Pool a pool holding only it, and PEM
	// its PEM encoding (a --…-ca or --…-client-ca file's content).
	Cert *x509.Certificate
	Pool *x509.CertPool
	PEM  []byte
	key  *ecdsa.PrivateKey
}

// serial numbers the certificates of every CA (tests run in parallel).
var serial atomic.Int64

// NewCA makes a self-signed CA named cn, valid from an hour ago for a day.
func NewCA(t testing.TB, cn string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: cn}, IsCA: true,
		BasicConstraintsValid: true, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Cert: cert, Pool: pool, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
}

// Issue makes a certificate named cn for 127.0.0.1 and localhost, for
// server and client authentication, and returns it and its PKCS #8 key
// as PEM.
func (ca *CA) Issue(t testing.TB, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: cn},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// WritePair writes a certificate Issue makes for cn to dir/name.crt and
// its key to dir/name.key, and returns the two paths.
func (ca *CA) WritePair(t testing.TB, dir, name, cn string) (certFile, keyFile string) {
	t.Helper()
	c, k := ca.Issue(t, cn)
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writeSecret(t, certFile, c)
	writeSecret(t, keyFile, k)
	return certFile, keyFile
}

// WriteCert writes the CA's certificate to path, as PEM.
func (ca *CA) WriteCert(t testing.TB, path string) {
	t.Helper()
	writeSecret(t, path, ca.PEM)
}

// TLSCert is a certificate Issue makes for cn, ready for a tls.Config
// (an mTLS client's).
func (ca *CA) TLSCert(t testing.TB, cn string) tls.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(ca.Issue(t, cn))
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// WriteCA writes the certificate of a CA made for the test to path, as PEM
// (a --nats-ca or --redis-ca file that parses).
func WriteCA(t testing.TB, path string) {
	t.Helper()
	NewCA(t, "tollgate test CA").WriteCert(t, path)
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// writeSecret writes b to path, readable by the owner only.
func writeSecret(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
