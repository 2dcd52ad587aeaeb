package service

import (
	"context"
	"crypto/tls"
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
