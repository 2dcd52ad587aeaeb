package streams

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// TestNATSTLS (7.5): against a real nats-server that speaks only TLS and
// requires a password, Dial and Connect with Auth{CA} reach it and a
// message goes through JetStream and back; with the system roots or an
// unrelated CA the connection fails naming the certificate problem, and
// with the CA but no password it fails naming the authorization.
func TestNATSTLS(t *testing.T) {
	t.Parallel()
	ns := testenv.StartNATSTLS(t, "limiter", "s3cret")
	url := ns.TLSURL("limiter", "s3cret")
	auth := Auth{CA: ns.CA}
	if err := auth.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := Dial(url, 2*time.Second, auth.Options()...); err != nil {
		t.Fatalf("Dial with the CA: %v", err)
	}
	for name, a := range map[string]Auth{"system roots": {}, "wrong CA": {CA: ns.OtherCA}} {
		err := Dial(url, 2*time.Second, a.Options()...)
		if err == nil || !strings.Contains(err.Error(), "x509: certificate signed by unknown authority") {
			t.Errorf("Dial with %s = %v, want the unknown authority", name, err)
		}
	}
	if err := Dial(ns.TLSURL("", ""), 2*time.Second, auth.Options()...); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Errorf("Dial without a password = %v, want an authorization error", err)
	}
	// nats+tls:// is the same as tls://.
	if err := Dial(strings.Replace(url, "tls://", "nats+tls://", 1), 2*time.Second, auth.Options()...); err != nil {
		t.Errorf("Dial nats+tls:// = %v", err)
	}

	nc, err := Connect(url, "tollgate-test", auth.Options()...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := Config{Prefix: "tlstest.", Name: "TLSTEST", Memory: true}
	if err := EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, cfg.decisionsSubject("auth"), []byte("over tls")); err != nil {
		t.Fatal(err)
	}
	// One filter subject: the Debian nats-server (2.9) has no FilterSubjects.
	c, err := js.CreateOrUpdateConsumer(ctx, cfg.Stream(DecisionsStream), jetstream.ConsumerConfig{Durable: "tls-test", FilterSubject: cfg.Prefix + "decisions.>", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data()) != "over tls" || m.Subject() != "tlstest.decisions.auth" {
		t.Fatalf("consumed %q on %s", m.Data(), m.Subject())
	}
}
