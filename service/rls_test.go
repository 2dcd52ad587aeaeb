package service

import (
	"context"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// envoyPolicy is docs/gateways.md's Envoy policy.
const envoyPolicy = `version: 1
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "GET *", class: read}
limits:
  - {name: ip, by: [ip], rate: 100/min}
  - {name: user-read, by: [user], rate: 3/min, if: {class: read}}
  - {name: login-account, by: [account, route], rate: 5/min, if: {class: auth}}
failure_mode: {default: open, auth: closed}
envoy:
  domain: mobile-api
  entries:
    remote_address: ip
    method: endpoint_method
    path: endpoint_path
    user_id: user
    device_id: device
    account: account
`

func rlsClient(t testing.TB, addr string) (rlsv3.RateLimitServiceClient, *grpc.ClientConn) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn), conn
}

func entry(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// envoyRequest is what Envoy sends with docs/gateways.md's route
// rate_limits: remote_address; method + path; user_id and device_id from
// headers (absent headers drop their descriptor); account from a header
// on the login route.
func envoyRequest(domain, method, path string, hits uint32, kv ...string) *rlsv3.RateLimitRequest {
	r := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits, Descriptors: []*commonv3.RateLimitDescriptor{
		entry("remote_address", "198.51.100.7"),
		entry("method", method, "path", path),
	}}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Descriptors = append(r.Descriptors, entry(kv[i], kv[i+1]))
	}
	return r
}

func rlsHeaders(resp *rlsv3.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		m[h.Key] = h.Value
	}
	return m
}

// TestEnvoyRLSEndToEnd runs the limiter with --grpc-listen and Redis
// (its own redis-server, stopped mid-test) and calls it with Envoy's
// generated client: several descriptors and hits_addend decide once, an
// unknown domain is OK with no limit and counted, the HTTP check and the
// gRPC path share buckets and metrics, and with Redis down auth fails
// closed (OVER_LIMIT, the 503 envelope) while reads fail open.
func TestEnvoyRLSEndToEnd(t *testing.T) {
	t.Parallel()
	redisSrv := testenv.StartRedis(t)
	r, base := start(t, Config{ConfigPath: writePolicy(t, envoyPolicy), GRPCListen: "127.0.0.1:0",
		RedisURL: "redis://" + redisSrv.Addr + "/0", StoreTimeout: 100 * time.Millisecond, NoL1: true})
	c, conn := rlsClient(t, r.GRPCAddr)
	ctx := context.Background()
	call := func(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := c.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	hc, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("grpc health: %v %v", hc, err)
	}

	feed := envoyRequest("mobile-api", "GET", "/feed?page=1", 2, "user_id", "u_1", "device_id", "d_1")
	resp := call(feed)
	st := resp.Statuses
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || len(st) != 4 || st[3].CurrentLimit.GetName() != "user-read" || st[3].LimitRemaining != 1 ||
		rlsHeaders(resp)["x-ratelimit-remaining"] != "1" {
		t.Fatalf("first: %v", resp)
	}
	// the HTTP check of the same request shares the bucket: 1 left, taken
	if hr, body := post(t, base+"/v1/check", `{"endpoint":"GET /feed","ip":"198.51.100.7","user_id":"u_1"}`); hr.StatusCode != 200 ||
		hr.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("check after rls: %d %s", hr.StatusCode, body)
	}
	resp = call(feed)
	h := rlsHeaders(resp)
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || h["retry-after"] == "" || h["x-tollgate-status"] != "429" ||
		!strings.HasPrefix(string(resp.RawBody), `{"error":{"code":"RATE_LIMITED","message":"Too many requests","details":{"retry_after_ms":`) {
		t.Fatalf("over: %v", resp)
	}
	for i := 0; i < 3; i++ {
		if resp := call(envoyRequest("another-domain", "GET", "/feed", 1, "user_id", "u_1")); resp.OverallCode != rlsv3.RateLimitResponse_OK ||
			resp.Statuses[0].CurrentLimit != nil {
			t.Fatalf("unknown domain: %v", resp)
		}
	}
	_, metrics := get(t, base+"/metrics")
	for _, want := range []string{
		`tollgate_rls_requests_total{result="unknown_domain"} 3`,
		`tollgate_rls_requests_total{result="over_limit"} 1`,
		`tollgate_rls_requests_total{result="ok"} 1`,
		`tollgate_decisions_total{class="read",limit="user-read",result="limited"} 1`,
		`tollgate_decisions_total{class="read",limit="user-read",result="allowed"} 2`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	redisSrv.Stop()
	login := envoyRequest("mobile-api", "POST", "/auth/login", 0, "account", "alice")
	resp = call(login)
	h = rlsHeaders(resp)
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || h["retry-after"] != "1" || h["x-tollgate-status"] != "503" ||
		!strings.HasPrefix(string(resp.RawBody), `{"error":{"code":"LIMITER_UNAVAILABLE","message":"Rate limiter unavailable","details":{"retry_after_ms":1000}`) {
		t.Fatalf("auth with Redis down: %v", resp)
	}
	resp = call(envoyRequest("mobile-api", "GET", "/feed", 1, "user_id", "u_2"))
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || rlsHeaders(resp)["x-ratelimit-degraded"] != "1" {
		t.Fatalf("read with Redis down: %v", resp)
	}
	redisSrv.Restart(t)
	eventually(t, 5*time.Second, func() string {
		if resp := call(login); resp.OverallCode != rlsv3.RateLimitResponse_OK {
			return "login still " + resp.OverallCode.String()
		}
		return ""
	})
}
