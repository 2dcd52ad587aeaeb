package service

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// writePair writes a certificate of ca named cn into dir/name.{crt,key}.
func writePair(t *testing.T, ca *testenv.CA, dir, name, cn string) TLSFiles {
	t.Helper()
	cert, key := ca.WritePair(t, dir, name, cn)
	return TLSFiles{Cert: cert, Key: key}
}

// servedName dials addr with TLS and returns the server certificate's name.
func servedName(t *testing.T, addr string, ca *testenv.CA) (string, error) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1"})
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

// TestTLSListenerReloadsCertificate (7.5): --tls-cert/--tls-key serve
// HTTPS on --listen, and a certificate rewritten in place is the one the
// next connection gets, without a restart.
func TestTLSListenerReloadsCertificate(t *testing.T) {
	t.Parallel()
	ca, dir := testenv.NewCA(t, "tollgate test CA"), t.TempDir()
	files := writePair(t, ca, dir, "server", "first")
	r, _ := start(t, Config{TLS: files})
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}, Timeout: 10 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	resp, err := hc.Get("https://" + r.Addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil {
		t.Fatalf("https /healthz: %d %v", resp.StatusCode, resp.TLS)
	}
	if name, err := servedName(t, r.Addr, ca); err != nil || name != "first" {
		t.Fatalf("served %q %v, want first", name, err)
	}
	writePair(t, ca, dir, "server", "second")
	eventually(t, 10*time.Second, func() string {
		name, err := servedName(t, r.Addr, ca)
		if err != nil || name != "second" {
			return "served " + name + " after the rewrite, want second"
		}
		return ""
	})
	resp, err = http.Get("http://" + r.Addr + "/healthz")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 { // net/http answers plaintext on a TLS port with a 400
			t.Fatal("plaintext request served on the TLS listener")
		}
	}
}

// TestMTLSOnAPIAndGRPC (7.5): with --api-tls-client-ca and
// --grpc-tls-client-ca a client without a certificate from those CAs is
// refused at the handshake, and one with a certificate is answered, on
// the API listener of proxy mode and on the gRPC listener (as Envoy's
// rate-limit cluster with TLS is set up).
func TestMTLSOnAPIAndGRPC(t *testing.T) {
	t.Parallel()
	ca, other, dir := testenv.NewCA(t, "tollgate test CA"), testenv.NewCA(t, "tollgate test CA"), t.TempDir()
	caFile := filepath.Join(dir, "clients.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	api, grpcFiles := writePair(t, ca, dir, "api", "api"), writePair(t, ca, dir, "grpc", "grpc")
	api.ClientCA, grpcFiles.ClientCA = caFile, caFile
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	r, _ := start(t, Config{Upstream: up, APITLS: api, GRPCListen: "127.0.0.1:0", GRPCTLS: grpcFiles, ConfigPath: writeEnvoyPolicy(t)})

	good, bad := ca.TLSCert(t, "envoy"), other.TLSCert(t, "intruder")
	for _, c := range []struct {
		name  string
		certs []tls.Certificate
		ok    bool
	}{{"no client certificate", nil, false}, {"another CA's certificate", []tls.Certificate{bad}, false}, {"the CA's certificate", []tls.Certificate{good}, true}} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool, Certificates: c.certs}}
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + r.APIAddr + "/healthz")
		tr.CloseIdleConnections()
		if c.ok != (err == nil) || err == nil && resp.StatusCode != 200 {
			t.Fatalf("API listener, %s: %v %v", c.name, resp, err)
		}
		if resp != nil {
			resp.Body.Close()
		}
		conn, err := grpc.NewClient(r.GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.Pool, Certificates: c.certs})))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, envoyRequest("mobile-api", "GET", "/feed", 1, "user_id", "u_tls"))
		cancel()
		conn.Close()
		if c.ok != (err == nil) || err == nil && out.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("gRPC listener, %s: %v %v", c.name, out, err)
		}
	}
}

// writeEnvoyPolicy writes envoyPolicy to a file of the test's.
func writeEnvoyPolicy(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(p, []byte(envoyPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTLSFlagsGoTogether: a certificate without its key, a client CA
// without a certificate and API TLS without proxy mode are usage errors.
func TestTLSFlagsGoTogether(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{TLS: TLSFiles{Cert: "a.crt"}}, "--tls-cert and --tls-key go together"},
		{Config{GRPCListen: "127.0.0.1:0", GRPCTLS: TLSFiles{ClientCA: "ca.PEM"}}, "--grpc-tls-client-ca needs --grpc-tls-cert"},
		{Config{APITLS: TLSFiles{Cert: "a.crt", Key: "a.key"}}, "--api-tls-* without --upstream"},
		{Config{GRPCTLS: TLSFiles{Cert: "a.crt", Key: "a.key"}}, "--grpc-tls-* without --grpc-listen"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}

// handshake dials addr with TLS presenting certs (h2 offered, as gRPC
// needs) and returns the server certificate's name, or the error the
// server's refusal gives: a TLS 1.3 server refuses a client certificate
// after the client's handshake, so a short read brings its alert.
func handshake(addr string, ca *testenv.CA, certs []tls.Certificate) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1", Certificates: certs, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return "", err
		}
	}
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

// TestTLSReloadOnEveryListener (7.5): with --tls-*, --api-tls-* and
// --grpc-tls-* all set, a client CA each (mTLS), every listener refuses a
// client without a certificate of that CA and serves one with it; a
// certificate rewritten in place is, on each listener, the one the next
// connection gets, without a restart, and so is a rewritten client CA.
func TestTLSReloadOnEveryListener(t *testing.T) {
	t.Parallel()
	ca, other, dir := testenv.NewCA(t, "tollgate test CA"), testenv.NewCA(t, "tollgate test CA"), t.TempDir()
	caFile := filepath.Join(dir, "clients.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	names := []string{"public", "api", "grpc"}
	var files [3]TLSFiles
	for i, n := range names {
		files[i] = writePair(t, ca, dir, n, n+"-1")
		files[i].ClientCA = caFile
	}
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	r, _ := start(t, Config{Upstream: up, TLS: files[0], APITLS: files[1], GRPCListen: "127.0.0.1:0", GRPCTLS: files[2], ConfigPath: writeEnvoyPolicy(t)})
	good, bad := []tls.Certificate{ca.TLSCert(t, "client")}, []tls.Certificate{other.TLSCert(t, "intruder")}
	addrs := []string{r.Addr, r.APIAddr, r.GRPCAddr}
	for i, n := range names {
		if name, err := handshake(addrs[i], ca, good); err != nil || name != n+"-1" {
			t.Fatalf("%s listener: served %q %v, want %s-1", n, name, err, n)
		}
		for _, certs := range [][]tls.Certificate{nil, bad} {
			if _, err := handshake(addrs[i], ca, certs); err == nil || !strings.Contains(err.Error(), "certificate") {
				t.Fatalf("%s listener: a client with %d certificates, none of the CA's, was not refused: %v", n, len(certs), err)
			}
		}
		writePair(t, ca, dir, n, n+"-2")
	}
	for i, n := range names {
		eventually(t, 10*time.Second, func() string {
			if name, err := handshake(addrs[i], ca, good); err != nil || name != n+"-2" {
				return fmt.Sprintf("%s listener: served %q %v after the rewrite, want %s-2", n, name, err, n)
			}
			return ""
		})
	}
	// the client CA file rewritten: the other CA's clients are let in
	if err := os.WriteFile(caFile, other.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		eventually(t, 10*time.Second, func() string {
			if _, err := handshake(addrs[i], ca, bad); err != nil {
				return fmt.Sprintf("%s listener: the new client CA's certificate refused after the rewrite: %v", n, err)
			}
			return ""
		})
	}
}
