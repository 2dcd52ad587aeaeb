package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	ca, other := NewCA(t, "tollgate test NATS CA"), NewCA(t, "tollgate unrelated CA")
	s := &TLSNATS{CA: filepath.Join(dir, "ca.pem"), OtherCA: filepath.Join(dir, "other-ca.pem"), User: user, Password: password}
	ca.WriteCert(t, s.CA)
	other.WriteCert(t, s.OtherCA)
	certFile, keyFile := ca.WritePair(t, dir, "server", "127.0.0.1")
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
