package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// OperatorNATS is a nats-server started by StartNATSOperator: in
// operator (JWT) mode, it knows one operator and, preloaded in a memory
// resolver, the system account and an account with JetStream. Creds maps
// each user's name to its credentials file; OtherCreds is that of a user
// of an account and operator the server does not trust.
type OperatorNATS struct {
	*NATSServer
	Creds      map[string]string
	OtherCreds string
}

// NATSUser is a user of StartNATSOperator's account, with the
// permissions its JWT carries (none given: all).
type NATSUser struct {
	Name                        string
	PubAllow, PubDeny, SubAllow []string
}

// StartNATSOperator starts a JetStream nats-server in operator mode with
// an operator, accounts and users made for the test, as `nsc` would make
// them (docs/deploy.md).
func StartNATSOperator(t testing.TB, users ...NATSUser) *OperatorNATS {
	t.Helper()
	dir := t.TempDir()
	op, opJWT := newOperator(t, "tollgate-test")
	sys, sysJWT := newAccount(t, op, "SYS", false)
	acct, acctJWT := newAccount(t, op, "TOLLGATE", true)
	s := &OperatorNATS{Creds: map[string]string{}, OtherCreds: filepath.Join(dir, "other.creds")}
	for _, u := range users {
		s.Creds[u.Name] = filepath.Join(dir, u.Name+".creds")
		writeCreds(t, s.Creds[u.Name], acct, u)
	}
	other, _ := newOperator(t, "untrusted")
	otherAcct, _ := newAccount(t, other, "OTHER", true)
	writeCreds(t, s.OtherCreds, otherAcct, NATSUser{Name: "stranger"})
	conf := filepath.Join(dir, "nats.conf")
	body := fmt.Sprintf("operator: %s\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: {\n  %s: %s\n  %s: %s\n}\njetstream {\n  store_dir: %q\n}\n",
		opJWT, publicKey(t, sys), publicKey(t, sys), sysJWT, publicKey(t, acct), acctJWT, filepath.Join(dir, "js"))
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	s.NATSServer = StartNATSConfig(t, conf)
	return s
}

// newOperator makes an operator's key pair and self-signed JWT.
func newOperator(t testing.TB, name string) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := nkeys.CreateOperator()
	if err != nil {
		t.Fatal(err)
	}
	c := jwt.NewOperatorClaims(publicKey(t, kp))
	c.Name = name
	tok, err := c.Encode(kp)
	if err != nil {
		t.Fatal(err)
	}
	return kp, tok
}

// newAccount makes an account's key pair and its JWT signed by op, with
// JetStream unlimited when js.
func newAccount(t testing.TB, op nkeys.KeyPair, name string, js bool) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	c := jwt.NewAccountClaims(publicKey(t, kp))
	c.Name = name
	if js {
		c.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	}
	tok, err := c.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	return kp, tok
}

// writeCreds writes to path the credentials file (user JWT signed by
// acct, and the user's nkey seed) of a new user u.
func writeCreds(t testing.TB, path string, acct nkeys.KeyPair, u NATSUser) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	c := jwt.NewUserClaims(publicKey(t, kp))
	c.Name = u.Name
	c.Pub.Allow.Add(u.PubAllow...)
	c.Pub.Deny.Add(u.PubDeny...)
	c.Sub.Allow.Add(u.SubAllow...)
	tok, err := c.Encode(acct)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	creds, err := jwt.FormatUserConfig(tok, seed)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		t.Fatal(err)
	}
}

// publicKey is kp's public key.
func publicKey(t testing.TB, kp nkeys.KeyPair) string {
	t.Helper()
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub
}
