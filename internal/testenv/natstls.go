package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TLSNATS is a nats-server started by StartNATSTLS: it speaks only TLS,
// with a certificate for 127.0.0.1 signed by the PEM file CA, and requires
// User and Password. OtherCA is a PEM file of a CA that signed nothing
// (a wrong --nats-ca).
type TLSNATS struct {
	*NATSServer
	CA, OtherCA    string
	User, Password string
}

// StartNATSTLS starts a JetStream nats-server that requires TLS and the
// password of user, with a CA and server certificate made for the test.
func StartNATSTLS(t testing.TB, user, password string) *TLSNATS {
	t.Helper()
	dir := t.TempDir()
	caKey, caCert := testCA(t, "tollgate test NATS CA")
	_, other := testCA(t, "tollgate unrelated CA")
	s := &TLSNATS{CA: filepath.Join(dir, "ca.pem"), OtherCA: filepath.Join(dir, "other-ca.pem"), User: user, Password: password}
	writePEM(t, s.CA, "CERTIFICATE", caCert.Raw)
	writePEM(t, s.OtherCA, "CERTIFICATE", other.Raw)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kder)
	conf := filepath.Join(dir, "nats.conf")
	body := fmt.Sprintf("jetstream {\n  store_dir: %q\n}\ntls {\n  cert_file: %q\n  key_file: %q\n}\nauthorization {\n  user: %q\n  password: %q\n}\n",
		filepath.Join(dir, "js"), certFile, keyFile, user, password)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	s.NATSServer = StartNATSConfig(t, conf)
	return s
}

// TLSURL is the server's tls:// URL carrying user:password (with no user,
// none).
func (s *TLSNATS) TLSURL(user, password string) string {
	auth := ""
	if user != "" {
		auth = user + ":" + password + "@"
	}
	return strings.Replace(s.URL, "nats://", "tls://"+auth, 1)
}

// testCA makes a self-signed ECDSA CA certificate named cn.
func testCA(t testing.TB, cn string) (*ecdsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert
}

// writePEM writes der as one PEM block of type typ to path.
func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// WriteCA writes a self-signed CA certificate made for the test to path,
// as PEM (a --nats-ca or --redis-ca file that parses).
func WriteCA(t testing.TB, path string) {
	t.Helper()
	_, cert := testCA(t, "tollgate test CA")
	writePEM(t, path, "CERTIFICATE", cert.Raw)
}
