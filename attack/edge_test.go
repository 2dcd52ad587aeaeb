package attack

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/service"
)

// edgePolicy is the attack policy with the descriptors of
// docs/gateways.md's Envoy example mapped, device and account included:
// each of them is a header the client writes.
const edgePolicy = attackPolicy + `envoy:
  domain: mobile-api
  entries: {remote_address: ip, user_id: user, device_id: device, account: account, method: endpoint_method, path: endpoint_path}
`

// withEdgeGRPC serves the rate-limit service on a free port under edgePolicy.
func withEdgeGRPC(t *testing.T) setup {
	pol := filepath.Join(t.TempDir(), "edge-policy.yaml")
	if err := os.WriteFile(pol, []byte(edgePolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	return func(c *service.Config) { c.ConfigPath, c.GRPCListen = pol, "127.0.0.1:0" }
}

// edgeLogin is what Envoy sends for POST path from ip, with the account
// header and the extra descriptors (x-device-id, ...) the client chose.
func edgeLogin(ip, path, account string, extra ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "mobile-api", HitsAddend: 1, Descriptors: append([]*commonv3.RateLimitDescriptor{
		descriptor("remote_address", ip), descriptor("method", "POST", "path", path), descriptor("account", account)}, extra...)}
}

// rlsHeaders returns resp's response_headers_to_add.
func rlsHeaders(resp *rlsv3.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		m[h.Key] += h.Value
	}
	return m
}

// TestAttackRLSBadHeaderEscapesNothing: behind Envoy, whose documented
// filter has failure_mode_deny: false, an attacker whose login tries are
// used up sends a header the mapping refuses (X-Device-Id of 300 bytes,
// one with a control character, an account that grows past 256 bytes
// when lower-cased). A gRPC error would make Envoy let the try through,
// unlimited; Tollgate denies it (OVER_LIMIT, the 400 envelope), whether
// or not the attacker's limits are used up (6.10).
func TestAttackRLSBadHeaderEscapesNothing(t *testing.T) {
	t.Parallel()
	tg := start(t, withEdgeGRPC(t))
	c := grpcClient(t, tg.grpc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const attacker = "198.51.100.40"
	for i := 1; i <= 6; i++ { // login-account: 5/min
		resp, err := c.ShouldRateLimit(ctx, edgeLogin(attacker, "/auth/login", "victim"))
		if err != nil {
			t.Fatalf("try %d: %v", i, err)
		}
		if want := i > 5; (resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT) != want {
			t.Fatalf("try %d: %v, want denied %v", i, resp.OverallCode, want)
		}
	}
	for _, tt := range []struct {
		name, ip, account, device string
	}{
		{"long device, tries used up", attacker, "victim", strings.Repeat("d", 300)},
		{"control in device, tries used up", attacker, "victim", "d\x01"},
		{"long device, fresh address", "198.51.100.41", "other", strings.Repeat("d", 300)},
		{"account growing when lower-cased", "198.51.100.42", strings.Repeat("\u023a", 128), ""},
	} {
		var extra []*commonv3.RateLimitDescriptor
		if tt.device != "" {
			extra = append(extra, descriptor("device_id", tt.device))
		}
		resp, err := c.ShouldRateLimit(ctx, edgeLogin(tt.ip, "/auth/login", tt.account, extra...))
		if err != nil {
			t.Fatalf("%s: a gRPC error, which Envoy answers by failure_mode_deny (false: the try passes): %v", tt.name, err)
		}
		h := rlsHeaders(resp)
		if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || code(string(resp.RawBody)) != "BAD_REQUEST" || h["x-tollgate-status"] != "400" {
			t.Fatalf("%s: %v, want OVER_LIMIT with the 400 envelope", tt.name, resp)
		}
	}
	// the legitimate user, from elsewhere, still gets in
	resp, err := c.ShouldRateLimit(ctx, edgeLogin("203.0.113.50", "/auth/login", "bystander", descriptor("device_id", "d_ok")))
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("bystander: %v %v", resp, err)
	}
}

// TestAttackRLSPathSpellingsShareTheLoginLimits: behind Envoy, whose
// :path is the client's undecoded one, an attacker spells the login path
// as upstreams still serve it (/auth%2Flogin, /auth%2flogin,
// /auth/%6cogin, //auth/./login/) to get fresh login tries. Every
// spelling is the route of POST /auth/login, as in proxy mode (6.4):
// login-account's 5/min holds across them.
func TestAttackRLSPathSpellingsShareTheLoginLimits(t *testing.T) {
	t.Parallel()
	tg := start(t, withEdgeGRPC(t))
	c := grpcClient(t, tg.grpc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spellings := []string{"/auth/login", "/auth%2Flogin", "/auth%2flogin", "/auth/%6cogin", "//auth/./login/", "/auth/x/../login?next=/", "/AUTH/%6Cogin", "/auth/login/"}
	for i, path := range spellings {
		resp, err := c.ShouldRateLimit(ctx, edgeLogin("198.51.100.60", path, "victim"))
		if err != nil {
			t.Fatalf("try %d (%s): %v", i+1, path, err)
		}
		want := rlsv3.RateLimitResponse_OK
		if i >= 5 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if resp.OverallCode != want || resp.Statuses[0].GetCurrentLimit().GetName() != "login-account" {
			t.Fatalf("try %d (%s): %v, want %v by login-account", i+1, path, resp, want)
		}
	}
}

// rawRequest is a gRPC codec that sends fixed protobuf bytes as the
// request: Envoy copies header bytes into entry values unchecked (a
// header value may carry any byte from 0x80 up), and no Go client
// marshals a string that is not UTF-8.
type rawRequest struct{ b []byte }

func (c rawRequest) Marshal(any) ([]byte, error)   { return c.b, nil }
func (rawRequest) Unmarshal(b []byte, v any) error { return proto.Unmarshal(b, v.(proto.Message)) }
func (rawRequest) Name() string                    { return "proto" }

// TestAttackRLSDeviceNotUTF8Denied: behind Envoy, an attacker whose
// login tries are used up sends X-Device-Id: \xff\xff. proto.Unmarshal
// refuses the message, and a decoding error is a gRPC error, which
// Envoy's failure_mode_deny: false lets through; Tollgate decodes it and
// denies the value as the bad value it is (OVER_LIMIT, the 400 envelope).
func TestAttackRLSDeviceNotUTF8Denied(t *testing.T) {
	t.Parallel()
	tg := start(t, withEdgeGRPC(t))
	c := grpcClient(t, tg.grpc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const attacker = "198.51.100.70"
	for i := 1; i <= 5; i++ { // login-account: 5/min
		if resp, err := c.ShouldRateLimit(ctx, edgeLogin(attacker, "/auth/login", "victim")); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("try %d: %v %v", i, resp, err)
		}
	}
	b, err := proto.Marshal(edgeLogin(attacker, "/auth/login", "victim", descriptor("device_id", "MARK")))
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte("MARK"), []byte{0xff, 0xff, 0xff, 0xff}, 1)
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{}, grpc.ForceCodec(rawRequest{b}))
	if err != nil {
		t.Fatalf("a gRPC error, which Envoy answers by failure_mode_deny (false: the try passes): %v", err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || code(string(resp.RawBody)) != "BAD_REQUEST" || rlsHeaders(resp)["x-tollgate-status"] != "400" {
		t.Fatalf("%v, want OVER_LIMIT with the 400 envelope", resp)
	}
}

// TestAttackRLSNotUTF8InAFullerMessageDenied: the same header, \xff in
// X-Device-Id, in a message that is not the plain form Envoy usually
// sends: a descriptor carrying a `limit` override (a route whose rate
// comes from dynamic metadata), or a field this build does not know (a
// newer Envoy's). proto.Unmarshal refuses the message for the header;
// a decoding error would be a gRPC error, which failure_mode_deny: false
// lets through. It is denied as the plain form's is.
func TestAttackRLSNotUTF8InAFullerMessageDenied(t *testing.T) {
	t.Parallel()
	tg := start(t, withEdgeGRPC(t))
	c := grpcClient(t, tg.grpc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	override := descriptor("device_id", "MARK")
	override.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1000, Unit: 2}
	plain, err := proto.Marshal(edgeLogin("198.51.100.71", "/auth/login", "victim", descriptor("device_id", "MARK")))
	if err != nil {
		t.Fatal(err)
	}
	withLimit, err := proto.Marshal(edgeLogin("198.51.100.71", "/auth/login", "victim", override))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"limit override": withLimit,
		"unknown field":  append(plain, 0xf8, 0x06, 0x01), // field 111, varint 1
	} {
		b = bytes.Replace(b, []byte("MARK"), []byte{0xff, 0xfe, 0xff, 0xfe}, 1)
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{}, grpc.ForceCodec(rawRequest{b}))
		if err != nil {
			t.Fatalf("%s: a gRPC error, which Envoy answers by failure_mode_deny (false: the try passes): %v", name, err)
		}
		if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || code(string(resp.RawBody)) != "BAD_REQUEST" || rlsHeaders(resp)["x-tollgate-status"] != "400" {
			t.Fatalf("%s: %v, want OVER_LIMIT with the 400 envelope", name, resp)
		}
	}
}
