package rls

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate-dev/tollgate/api"
	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// testPolicy maps the descriptors of docs/gateways.md's Envoy example.
const testPolicy = `version: 1
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "GET *", class: read}
limits:
  - {name: ip, by: [ip], rate: 10/min}
  - {name: user-read, by: [user], rate: 5/min, if: {class: read}}
  - {name: login-account, by: [account, route], rate: 3/min, if: {class: auth}}
failure_mode: {default: open, auth: closed}
envoy:
  domain: mobile-api
  entries:
    remote_address: ip
    user_id: user
    device_id: device
    account: account
    method: endpoint_method
    path: endpoint_path
    plan: attr:plan
`

// t0 is the tests' clock: 2024-04-19T10:30:00Z.
var t0 = time.Unix(1713522600, 0).UTC()

type events struct {
	mu   sync.Mutex
	list []streams.Decision
}

func (e *events) Decision(d *streams.Decision) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, *d)
}

type env struct {
	client rlsv3.RateLimitServiceClient
	reg    *prometheus.Registry
	rls    *Server
	api    *api.Server // the check API the RLS decides through
	events *events
}

// newEnv serves the RLS over loopback TCP in front of an api.Server (the
// check path) on a memory store with a fixed clock, and returns the
// generated Envoy client connected to it.
func newEnv(t testing.TB, store bucket.Store) *env {
	t.Helper()
	return newEnvPolicy(t, store, testPolicy)
}

// newEnvPolicy is newEnv with the policy src.
func newEnvPolicy(t testing.TB, store bucket.Store, src string) *env {
	t.Helper()
	p, err := policy.Parse("rls.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if store == nil {
		store = bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return t0 }})
	}
	e := &env{reg: prometheus.NewRegistry(), events: &events{}}
	pol := func() *policy.Policy { return p }
	eng, err := engine.New(engine.Options{Store: store, Policy: pol, Metrics: engine.NewMetrics(e.reg),
		Clock: func() time.Time { return t0 }, Breaker: engine.NewBreaker(engine.BreakerOptions{Failures: 1000}, nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if e.api, err = api.New(api.Options{Engine: eng, Events: e.events, Gatherer: e.reg}); err != nil {
		t.Fatal(err)
	}
	if e.rls, err = New(Options{Decider: e.api, Policy: pol, Registerer: e.reg}); err != nil {
		t.Fatal(err)
	}
	e.client = Serve(t, e.rls)
	return e
}

// Serve serves s's ShouldRateLimit on grpc-go's server with the
// service's codec (the limiter's setup) on a free loopback port and
// returns Envoy's generated client connected to it; both stop at cleanup.
func Serve(t testing.TB, s *Server) rlsv3.RateLimitServiceClient {
	t.Helper()
	return ServeGRPC(t, s, grpc.ForceServerCodecV2(s.Codec()))
}

// ServeGRPC is Serve with opts instead of the service's codec.
func ServeGRPC(t testing.TB, s *Server, opts ...grpc.ServerOption) rlsv3.RateLimitServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	s.Register(g)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	return dial(t, ln.Addr().String())
}

// dial returns the generated client on a connection to addr, closed at
// cleanup.
func dial(t testing.TB, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// feed is what Envoy sends for `GET /feed?page=2` from 198.51.100.7 with
// x-user-id u_1, configured as in docs/gateways.md: three rate_limits
// entries, so three descriptors.
func feed(user string, hits uint32) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "mobile-api", HitsAddend: hits, Descriptors: []*commonv3.RateLimitDescriptor{
		desc("remote_address", "198.51.100.7"),
		desc("method", "GET", "path", "/feed?page=2"),
		desc("user_id", user),
	}}
}

func headers(resp *rlsv3.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		m[h.Key] += h.Value
	}
	return m
}

func call(t *testing.T, e *env, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := e.client.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func wantHeaders(t *testing.T, resp *rlsv3.RateLimitResponse, kv ...string) {
	t.Helper()
	h := headers(resp)
	for i := 0; i+1 < len(kv); i += 2 {
		if h[kv[i]] != kv[i+1] {
			t.Errorf("header %s = %q, want %q (all: %v)", kv[i], h[kv[i]], kv[i+1], h)
		}
	}
}

func wantStatuses(t *testing.T, resp *rlsv3.RateLimitResponse, n int, code rlsv3.RateLimitResponse_Code, name string, limit, remaining uint32, reset time.Duration) {
	t.Helper()
	if len(resp.Statuses) != n {
		t.Fatalf("%d statuses, want %d", len(resp.Statuses), n)
	}
	for i, st := range resp.Statuses {
		cl := st.GetCurrentLimit()
		if st.Code != code || cl.GetName() != name || cl.GetRequestsPerUnit() != limit || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE ||
			st.LimitRemaining != remaining || st.GetDurationUntilReset().AsDuration() != reset {
			t.Fatalf("status %d = %v, want %v %s %d/MINUTE remaining %d reset %v", i, st, code, name, limit, remaining, reset)
		}
	}
}

func TestShouldRateLimitSeveralDescriptors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	resp := call(t, e, feed("u_1", 0))
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.RawBody) != 0 {
		t.Fatalf("first: %v", resp)
	}
	// one request, decided once: ip (10/min) and user-read (5/min) both
	// took one token; user-read binds (fewest left relative to its burst)
	wantStatuses(t, resp, 3, rlsv3.RateLimitResponse_OK, "user-read", 5, 4, 12*time.Second)
	wantHeaders(t, resp, "x-ratelimit-limit", "5", "x-ratelimit-remaining", "4", "x-ratelimit-reset", "1713522612",
		"ratelimit-policy", `"user-read";q=5;w=60`, "ratelimit", `"user-read";r=4;t=12`, "retry-after", "", "x-tollgate-status", "")

	// hits_addend is the cost: 3 more tokens
	resp = call(t, e, feed("u_1", 3))
	wantStatuses(t, resp, 3, rlsv3.RateLimitResponse_OK, "user-read", 5, 1, 48*time.Second)

	// 2 more do not fit: OVER_LIMIT, the envelope in raw_body, and the
	// denied request took nothing from any bucket (all-or-nothing)
	resp = call(t, e, feed("u_1", 2))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("over: %v", resp)
	}
	wantStatuses(t, resp, 3, rlsv3.RateLimitResponse_OVER_LIMIT, "user-read", 5, 1, 48*time.Second)
	rid := headers(resp)["x-request-id"]
	wantEnv := `{"error":{"code":"RATE_LIMITED","message":"Too many requests","details":{"retry_after_ms":12000,"limit":"user-read","scope":"user"},"request_id":"` + rid + `"}}`
	if len(rid) != 26 || strings.TrimSpace(string(resp.RawBody)) != wantEnv {
		t.Fatalf("raw_body = %s\nwant %s", resp.RawBody, wantEnv)
	}
	wantHeaders(t, resp, "retry-after", "12", "x-tollgate-status", "429", "content-type", "application/json",
		"x-ratelimit-limit", "5", "x-ratelimit-remaining", "1", "ratelimit", `"user-read";r=1;t=48`, "content-length", "")

	// the ip bucket lost only the 4 allowed tokens: a request with the ip
	// alone binds on it with 10-4-1 = 5 left
	resp = call(t, e, &rlsv3.RateLimitRequest{Domain: "mobile-api", Descriptors: []*commonv3.RateLimitDescriptor{desc("remote_address", "198.51.100.7")}})
	wantStatuses(t, resp, 1, rlsv3.RateLimitResponse_OK, "ip", 10, 5, 30*time.Second)

	// the same decision events as the check API
	e.events.mu.Lock()
	defer e.events.mu.Unlock()
	if len(e.events.list) != 4 {
		t.Fatalf("%d events, want 4", len(e.events.list))
	}
	ev := e.events.list[2]
	if ev.Endpoint != "GET /feed" || ev.Class != "read" || ev.IP != "198.51.100.7" || ev.UserID != "u_1" || ev.Allowed || ev.Result != "limited" ||
		ev.Limit != "user-read" || ev.RequestID != rid {
		t.Fatalf("event %+v", ev)
	}
	if e.events.list[3].Endpoint != "" || e.events.list[3].Class != "default" {
		t.Fatalf("no method and path: no route, class default: %+v", e.events.list[3])
	}
	if got := testutil.ToFloat64(e.rls.requests.WithLabelValues(ResultOverLimit)); got != 1 {
		t.Fatalf("over_limit count %v", got)
	}
}

// TestShouldRateLimitDescriptorHits: per-descriptor hits_addend (newer
// Envoys) is the cost; the largest wins, and negative-hit descriptors are
// ignored.
func TestShouldRateLimitDescriptorHits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	req := feed("u_2", 1)
	req.Descriptors[0].HitsAddend = wrapperspb.UInt64(2)
	req.Descriptors[2].HitsAddend = wrapperspb.UInt64(3)
	neg := desc("user_id", "someone-else")
	neg.IsNegativeHits = true
	req.Descriptors = append(req.Descriptors, neg)
	wantStatuses(t, call(t, e, req), 4, rlsv3.RateLimitResponse_OK, "user-read", 5, 2, 36*time.Second)
}

func TestShouldRateLimitUnknownDomain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	req := feed("u_3", 0)
	req.Domain = "other"
	for i := 0; i < 10; i++ {
		resp := call(t, e, req)
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.Statuses) != 3 || resp.Statuses[0].CurrentLimit != nil || len(resp.ResponseHeadersToAdd) != 0 {
			t.Fatalf("unknown domain: %v", resp)
		}
	}
	if got := testutil.ToFloat64(e.rls.requests.WithLabelValues(ResultUnknownDomain)); got != 10 {
		t.Fatalf("unknown_domain count %v", got)
	}
	// nothing was decided: the user still has all 5
	wantStatuses(t, call(t, e, feed("u_3", 0)), 3, rlsv3.RateLimitResponse_OK, "user-read", 5, 4, 12*time.Second)
}

// TestShouldRateLimitLoginAndFailure: accounts are normalised; a store
// failure answers by the failure modes: auth fails closed (OVER_LIMIT
// with the 503 envelope), read fails open (OK, degraded).
func TestShouldRateLimitLoginAndFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	login := func(acct string) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "mobile-api", Descriptors: []*commonv3.RateLimitDescriptor{
			desc("remote_address", "2001:DB8::1", "method", "POST", "path", "/auth/login"), desc("account", acct)}}
	}
	wantStatuses(t, call(t, e, login("Alice@Example.com")), 2, rlsv3.RateLimitResponse_OK, "login-account", 3, 2, 20*time.Second)
	wantStatuses(t, call(t, e, login(" alice@example.com")), 2, rlsv3.RateLimitResponse_OK, "login-account", 3, 1, 40*time.Second)

	down := newEnv(t, failing{})
	resp := call(t, down, login("alice"))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("fail closed: %v", resp)
	}
	rid := headers(resp)["x-request-id"]
	if want := `{"error":{"code":"LIMITER_UNAVAILABLE","message":"Rate limiter unavailable","details":{"retry_after_ms":1000},"request_id":"` + rid + `"}}`; strings.TrimSpace(string(resp.RawBody)) != want {
		t.Fatalf("raw_body %s", resp.RawBody)
	}
	wantHeaders(t, resp, "retry-after", "1", "x-tollgate-status", "503")
	resp = call(t, down, feed("u_1", 0))
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.RawBody) != 0 {
		t.Fatalf("fail open: %v", resp)
	}
	wantHeaders(t, resp, "x-ratelimit-degraded", "1", "x-ratelimit-limit", "5")
}

// TestShouldRateLimitAnyCodec: on grpc-go's server, with its own codec
// (no fast decoder, no pooling back) or the service's, the answers are
// the same.
func TestShouldRateLimitAnyCodec(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	plain, codec := ServeGRPC(t, e.rls), ServeGRPC(t, e.rls, grpc.ForceServerCodecV2(e.rls.Codec()))
	for i, c := range []rlsv3.RateLimitServiceClient{e.client, plain, codec, e.client} {
		resp, err := c.ShouldRateLimit(context.Background(), feed("u_9", 1))
		if err != nil {
			t.Fatal(err)
		}
		wantStatuses(t, resp, 3, rlsv3.RateLimitResponse_OK, "user-read", 5, uint32(4-i), time.Duration(12*(i+1))*time.Second)
	}
}

// TestShouldRateLimitInvalid: a request whose entries cannot be mapped
// (a client's header over 256 bytes, a control character, bad UTF-8, an
// account that grows past 256 bytes when lower-cased, two values that
// disagree) is a denial Envoy enforces: OVER_LIMIT with the 400
// envelope naming the entry, never a gRPC error, which Envoy's
// failure_mode_deny: false would let through. It takes no tokens, and is
// counted and logged as invalid.
func TestShouldRateLimitInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		entries []string
		wantMsg string
		direct  bool // not through a Go client, which refuses to marshal bad UTF-8 (Envoy does not)
	}{
		{"long device", []string{"device_id", strings.Repeat("d", 300)}, `entry \"device_id\" (device) is longer than 256 bytes`, false},
		{"control in device", []string{"device_id", "d\x01"}, `entry \"device_id\" (device) contains a control character`, false},
		{"bad utf-8 user", []string{"user_id", "u\xff"}, `entry \"user_id\" (user) is not valid UTF-8`, true},
		{"account growing when lower-cased", []string{"account", strings.Repeat("\u023a", 128)}, `entry \"account\" (account) is longer than 256 bytes`, false},
		{"long attribute", []string{"plan", strings.Repeat("p", 257)}, `entry \"plan\": attribute \"plan\" is longer than 256 bytes`, false},
		{"bad ip", []string{"remote_address", "1.2.3"}, `entry \"remote_address\": not an IP address: \"1.2.3\"`, false},
		{"conflict", []string{"remote_address", "203.0.113.1"}, `ip is given two different values (\"198.51.100.7\", then \"203.0.113.1\" in entry \"remote_address\")`, false},
		{"long path", []string{"path", "/" + strings.Repeat("p", 2048)}, `entry \"path\": the path is longer than 2048 bytes`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			req := feed("u_1", 0)
			req.Descriptors = append(req.Descriptors, desc(tt.entries...))
			var resp *rlsv3.RateLimitResponse
			var err error
			if tt.direct {
				resp, err = e.rls.ShouldRateLimit(context.Background(), req)
			} else {
				resp, err = e.client.ShouldRateLimit(context.Background(), req)
			}
			if err != nil {
				t.Fatalf("a gRPC error, which Envoy lets through: %v", err)
			}
			if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || len(resp.Statuses) != len(req.Descriptors) {
				t.Fatalf("not a denial: %v", resp)
			}
			for _, st := range resp.Statuses {
				if st.Code != rlsv3.RateLimitResponse_OVER_LIMIT || st.CurrentLimit != nil {
					t.Fatalf("status %v", st)
				}
			}
			rid := headers(resp)["x-request-id"]
			want := `{"error":{"code":"BAD_REQUEST","message":"` + tt.wantMsg + `","details":{},"request_id":"` + rid + `"}}`
			if rid == "" || strings.TrimSpace(string(resp.RawBody)) != want {
				t.Fatalf("raw_body %s\nwant     %s", resp.RawBody, want)
			}
			wantHeaders(t, resp, "content-type", "application/json", "x-tollgate-status", "400")
			if h := headers(resp); h["retry-after"] != "" || h["content-length"] != "" {
				t.Fatalf("headers %v", h)
			}
			if got := testutil.ToFloat64(e.rls.requests.WithLabelValues(ResultInvalid)); got != 1 {
				t.Fatalf("invalid count %v", got)
			}
			// no tokens taken: the user's bucket is still full
			wantStatuses(t, call(t, e, feed("u_1", 0)), 3, rlsv3.RateLimitResponse_OK, "user-read", 5, 4, 12*time.Second)
		})
	}
}

// failing is a store whose every decision fails, as a dead Redis does.
type failing struct{ bucket.Store }

func (failing) Decide(context.Context, *bucket.Request, *bucket.Result) error {
	return bucket.ErrUnavailable
}

// Prefix implements bucket.Store (the engine keys its decisions with it).
func (failing) Prefix() string { return bucket.DefaultPrefix }

// TestShouldRateLimitAttributesAndLists: attributes from descriptor
// entries key and condition limits (6.9), and the policy's lists apply
// to Envoy's requests as to the check API's: a denied IP is OVER_LIMIT
// with the 403 DENIED envelope, an allowed one is OK whatever the limits.
func TestShouldRateLimitAttributesAndLists(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	deny, allow := filepath.Join(dir, "deny.txt"), filepath.Join(dir, "allow.txt")
	if err := os.WriteFile(deny, []byte("203.0.113.66\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(allow, []byte("# partners\n192.0.2.0/24\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse("lists.yaml", []byte(`version: 1
limits:
  - {name: free-plan, by: [attr:plan, ip], rate: 2/min, if: {attr: {plan: [free]}}}
  - {name: ip, by: [ip], rate: 100/min}
lists:
  bad-ips: {file: `+deny+`, kind: ip}
  partners: {file: `+allow+`, kind: ip}
deny: [bad-ips]
allow: [partners]
envoy:
  domain: d
  entries: {remote_address: ip, plan: attr:plan}
`))
	if err != nil {
		t.Fatal(err)
	}
	pol := func() *policy.Policy { return p }
	eng, _ := engine.New(engine.Options{Store: bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return t0 }}), Policy: pol,
		Clock: func() time.Time { return t0 }})
	srv, _ := api.New(api.Options{Engine: eng})
	s, _ := New(Options{Decider: srv, Policy: pol})
	c := Serve(t, s)
	ask := func(ip, plan string) *rlsv3.RateLimitResponse {
		t.Helper()
		r := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{desc("remote_address", ip, "plan", plan)}}
		resp, err := c.ShouldRateLimit(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	wantStatuses(t, ask("198.51.100.1", "free"), 1, rlsv3.RateLimitResponse_OK, "free-plan", 2, 1, 30*time.Second)
	ask("198.51.100.1", "free")
	if resp := ask("198.51.100.1", "free"); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("3rd free-plan request: %v", resp)
	}
	wantStatuses(t, ask("198.51.100.1", "pro"), 1, rlsv3.RateLimitResponse_OK, "ip", 100, 97, 1800*time.Millisecond) // the denied 3rd took nothing
	resp := ask("203.0.113.66", "pro")
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || headers(resp)["x-tollgate-status"] != "403" ||
		!strings.Contains(string(resp.RawBody), `"code":"DENIED"`) {
		t.Fatalf("deny list: %v", resp)
	}
	for i := 0; i < 5; i++ {
		if resp := ask("192.0.2.7", "free"); resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("allow list, request %d: %v", i, resp)
		}
	}
}

// TestShouldRateLimitPathSpellings: every spelling of the login path
// that an upstream serves as /auth/login is the login route, and shares
// its limits (login-account, 3/min): the 4th and 5th tries are denied.
func TestShouldRateLimitPathSpellings(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	for i, path := range []string{"/auth/login", "/auth%2Flogin", "/auth%2flogin", "/auth/%6cogin", "//auth/./login/?next=/"} {
		resp := call(t, e, &rlsv3.RateLimitRequest{Domain: "mobile-api", Descriptors: []*commonv3.RateLimitDescriptor{
			desc("remote_address", "192.0.2.1", "method", "POST", "path", path), desc("account", "alice")}})
		want := rlsv3.RateLimitResponse_OK
		if i >= 3 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if resp.OverallCode != want || resp.Statuses[0].GetCurrentLimit().GetName() != "login-account" {
			t.Fatalf("try %d (%s): %v, want %v by login-account", i+1, path, resp, want)
		}
	}
}

// rawCodec sends fixed protobuf bytes as the request, as Envoy sends a
// header value that is not UTF-8: Envoy copies header bytes into entry
// values unchecked, and no Go client marshals them.
type rawCodec struct{ b []byte }

func (c rawCodec) Marshal(any) ([]byte, error)   { return c.b, nil }
func (rawCodec) Unmarshal(b []byte, v any) error { return proto.Unmarshal(b, v.(proto.Message)) }
func (rawCodec) Name() string                    { return "proto" }

// notUTF8 is req marshalled, with the bytes of mark (in one of its
// values) replaced by as many bytes that are not UTF-8.
func notUTF8(t *testing.T, req *rlsv3.RateLimitRequest, mark string) []byte {
	t.Helper()
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Replace(b, []byte(mark), bytes.Repeat([]byte{0xff}, len(mark)), 1)
}

// TestShouldRateLimitNotUTF8: a mapped entry whose value is not UTF-8
// (X-Device-Id: \xff\xff) is the bad value it is: OVER_LIMIT with the 400
// envelope, not the decoding error proto.Unmarshal makes of it, which
// Envoy would answer by failure_mode_deny. An unmapped entry's is
// ignored, as any unmapped entry is.
func TestShouldRateLimitNotUTF8(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	mapped := feed("u_1", 0)
	mapped.Descriptors = append(mapped.Descriptors, desc("device_id", "MARK"))
	resp, err := e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{}, grpc.ForceCodec(rawCodec{notUTF8(t, mapped, "MARK")}))
	if err != nil {
		t.Fatalf("a gRPC error, which Envoy lets through: %v", err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || !strings.Contains(string(resp.RawBody), `"code":"BAD_REQUEST","message":"entry \"device_id\" (device) is not valid UTF-8"`) {
		t.Fatalf("not the 400 denial: %v", resp)
	}
	wantHeaders(t, resp, "x-tollgate-status", "400")
	unmapped := feed("u_1", 0)
	unmapped.Descriptors = append(unmapped.Descriptors, desc("generic_key", "MARK"))
	resp, err = e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{}, grpc.ForceCodec(rawCodec{notUTF8(t, unmapped, "MARK")}))
	if err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, resp, 4, rlsv3.RateLimitResponse_OK, "user-read", 5, 4, 12*time.Second)
}

// TestShouldRateLimitNotUTF8FullerForm: in a message of the fuller form
// (a descriptor with a `limit` override, which the plain decoder does not
// read), a mapped entry's value that is not UTF-8 is refused as in the
// plain form, naming the entry, and an unmapped entry's is ignored as in
// the plain form: a header the policy does not use denies no one.
func TestShouldRateLimitNotUTF8FullerForm(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	override := &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1000, Unit: 2}
	mapped := feed("u_1", 0)
	mapped.Descriptors = append(mapped.Descriptors, desc("device_id", "MARK"))
	mapped.Descriptors[len(mapped.Descriptors)-1].Limit = override
	resp, err := e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{}, grpc.ForceCodec(rawCodec{notUTF8(t, mapped, "MARK")}))
	if err != nil {
		t.Fatalf("a gRPC error, which Envoy lets through: %v", err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || !strings.Contains(string(resp.RawBody), `"code":"BAD_REQUEST","message":"entry \"device_id\" (device) is not valid UTF-8"`) {
		t.Fatalf("not the 400 denial naming the entry: %v", resp)
	}
	unmapped := feed("u_1", 0)
	unmapped.Descriptors = append(unmapped.Descriptors, desc("generic_key", "MARK"))
	unmapped.Descriptors[len(unmapped.Descriptors)-1].Limit = override
	resp, err = e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{}, grpc.ForceCodec(rawCodec{notUTF8(t, unmapped, "MARK")}))
	if err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, resp, 4, rlsv3.RateLimitResponse_OK, "user-read", 5, 4, 12*time.Second)
}
