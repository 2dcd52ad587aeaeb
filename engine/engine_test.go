package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
)

const keyPolicy = `version: 1
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "* *", class: write}
limits:
  - {name: global,    by: [global],              rate: 100000/s}
  - {name: login-ip,  by: [ip, route],           rate: 10/min, if: {class: auth}}
  - {name: ud,        by: [user, device],        rate: 60/min}
  - {name: per-route, by: [route],               rate: 1000/s}
  - {name: acct,      by: [account, route],      rate: 5/min, if: {class: auth}}
`

// recordingStore captures the bucket request.
type recordingStore struct {
	*bucket.MemoryStore
	req bucket.Request
}

func (r *recordingStore) Decide(ctx context.Context, req *bucket.Request, res *bucket.Result) error {
	r.req = *req
	r.req.Limits = append([]bucket.Limit(nil), req.Limits...)
	r.req.Subjects = append([]bucket.RequestSubject(nil), req.Subjects...)
	r.req.Locks = append([]string(nil), req.Locks...)
	return r.MemoryStore.Decide(ctx, req, res)
}

func newEngine(t testing.TB, text string, store bucket.Store) *Engine {
	t.Helper()
	p, err := policy.Parse("p.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Options{Store: store, Policy: func() *policy.Policy { return p }})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestKeyLayout(t *testing.T) {
	t.Parallel()
	rs := &recordingStore{MemoryStore: bucket.NewMemoryStore(bucket.MemoryOptions{})}
	e := newEngine(t, keyPolicy, rs)
	in := Input{Endpoint: "POST /auth/login", IP: "198.51.100.7", UserID: "u}1", DeviceID: "d 1", DeviceVerified: true, Account: "alice@example.com", Cost: 1}
	in.Static[policy.PartIP], in.StaticSet[policy.PartIP] = 0.25, true
	var d Decision
	if err := e.Decide(context.Background(), &in, &d); err != nil {
		t.Fatal(err)
	}
	wantLimits := []struct {
		key  string
		mask uint32
	}{
		{"tg:{global}:b:global", 0},
		{"tg:{ip:198.51.100.7}:b:login-ip|POST%20/auth/login", 1},
		{"tg:{user:u%7D1}:b:ud|d%201", 2 | 4},
		{"tg:{route:POST%20/auth/login}:b:per-route", 0},
		{"tg:{account:alice@example.com}:b:acct|POST%20/auth/login", 8},
	}
	if len(rs.req.Limits) != len(wantLimits) {
		t.Fatalf("limits %+v", rs.req.Limits)
	}
	for i, w := range wantLimits {
		if l := rs.req.Limits[i]; l.Key != w.key || l.Subjects != w.mask {
			t.Errorf("limit %d: key %q mask %b, want %q %b", i, l.Key, l.Subjects, w.key, w.mask)
		}
	}
	wantSubjects := []bucket.RequestSubject{
		{Key: "tg:{ip:198.51.100.7}:m", Static: 0.25, Unverified: 1},
		{Key: "tg:{user:u%7D1}:m", Static: 1, Unverified: 1},
		{Key: "tg:{device:d%201}:m", Static: 1, Unverified: 1},
		{Key: "tg:{account:alice@example.com}:m", Static: 1, Unverified: 1},
	}
	for i, w := range wantSubjects {
		if rs.req.Subjects[i] != w {
			t.Errorf("subject %d: %+v, want %+v", i, rs.req.Subjects[i], w)
		}
	}
	if len(rs.req.Locks) != 2 || rs.req.Locks[0] != "tg:{account:alice@example.com}:l" || rs.req.Locks[1] != "tg:{ip:198.51.100.7}:l" {
		t.Errorf("locks %q", rs.req.Locks)
	}
	// the ip multiplier 0.25 applies to login-ip: burst 10 -> 2.5, 1.5 left
	if d.Outcome != Allowed || d.Binding.Name != "login-ip" || d.Limit != 2 || d.Remaining != 1 {
		t.Errorf("decision %+v binding %s", d, d.Binding.Name)
	}

	// a request without user, device or account: those limits do not apply, no lock
	in = Input{Endpoint: "GET /x", IP: "2001:db8::1", Cost: 1}
	if err := e.Decide(context.Background(), &in, &d); err != nil {
		t.Fatal(err)
	}
	if len(rs.req.Limits) != 2 || rs.req.Limits[1].Key != "tg:{route:*%20*}:b:per-route" || len(rs.req.Locks) != 0 || len(rs.req.Subjects) != 0 {
		t.Errorf("unkeyed request: %+v", rs.req)
	}
}

func TestBindingIsLongestWait(t *testing.T) {
	t.Parallel()
	e := newEngine(t, `version: 1
limits:
  - {name: fast, by: [ip], rate: 1/s, burst: 1}
  - {name: slow, by: [ip], rate: 1/min, burst: 1}
  - {name: roomy, by: [ip], rate: 100/min}
`, bucket.NewMemoryStore(bucket.MemoryOptions{}))
	now := time.Unix(1700000000, 0)
	in := Input{Endpoint: "GET /", IP: "192.0.2.1", Cost: 1, Now: now}
	var d Decision
	_ = e.Decide(context.Background(), &in, &d)
	if d.Outcome != Allowed || d.Binding.Name != "fast" || d.Remaining != 0 {
		t.Fatalf("first: %v %s", d.Outcome, d.Binding.Name)
	}
	_ = e.Decide(context.Background(), &in, &d)
	if d.Outcome != Limited || d.Binding.Name != "slow" || d.RetryAfter != time.Minute || d.Window != time.Minute {
		t.Fatalf("second: %v %s %v", d.Outcome, d.Binding.Name, d.RetryAfter)
	}
}

// TestNoEndpointMatchesNoRoute: an empty endpoint (an Envoy request
// without method and path) has class default even where a catch-all
// route would match every endpoint.
func TestNoEndpointMatchesNoRoute(t *testing.T) {
	t.Parallel()
	e := newEngine(t, `version: 1
routes:
  - {match: "* *", class: write}
limits:
  - {name: w, by: [ip], rate: 1/s, if: {class: write}}
  - {name: d, by: [ip], rate: 2/s, if: {class: default}}
`, bucket.NewMemoryStore(bucket.MemoryOptions{}))
	in := Input{IP: "192.0.2.1", Cost: 1}
	var d Decision
	if err := e.Decide(context.Background(), &in, &d); err != nil || d.Class != "default" || d.Route != "" || d.Binding.Name != "d" {
		t.Fatalf("no endpoint: %v class %q route %q", err, d.Class, d.Route)
	}
	in.Endpoint = "nonsense"
	if err := e.Decide(context.Background(), &in, &d); err == nil {
		t.Fatal("an endpoint without a space must be refused")
	}
}

func TestBreaker(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	var states []BreakerState
	b := NewBreaker(BreakerOptions{Failures: 3, Cooldown: time.Second}, func() time.Time { return now }, func(s BreakerState) { states = append(states, s) })
	for i := 0; i < 3; i++ {
		b.Done(allow(t, b, "call of a closed breaker"), false)
	}
	if _, ok := b.Allow(); b.State() != BreakerOpen || ok {
		t.Fatal("3 failures must open it and refuse calls")
	}
	now = now.Add(time.Second)
	probe, ok := b.Allow()
	if !ok || b.State() != BreakerHalfOpen {
		t.Fatal("after the cooldown one probe goes through")
	}
	if _, ok := b.Allow(); ok {
		t.Fatal("only one probe at a time")
	}
	b.Done(probe, false)
	if _, ok := b.Allow(); b.State() != BreakerOpen || ok {
		t.Fatal("a failed probe reopens")
	}
	now = now.Add(time.Second)
	b.Done(allow(t, b, "second probe"), true)
	if _, ok := b.Allow(); b.State() != BreakerClosed || !ok {
		t.Fatal("a good probe closes")
	}
	want := []BreakerState{BreakerOpen, BreakerHalfOpen, BreakerOpen, BreakerHalfOpen, BreakerClosed}
	if len(states) != len(want) {
		t.Fatalf("transitions %v, want %v", states, want)
	}
	for i := range want {
		if states[i] != want[i] {
			t.Fatalf("transitions %v, want %v", states, want)
		}
	}
}

// BenchmarkDecide4 is the whole engine on the memory store: policy match,
// key building and a 4-limit decision (ip, user, device, route).
func BenchmarkDecide4(b *testing.B) {
	e := newEngine(b, `version: 1
routes:
  - {match: "POST /bench", class: write}
limits:
  - {name: ip, by: [ip], rate: 1000000000/s}
  - {name: user, by: [user], rate: 1000000000/s}
  - {name: device, by: [device], rate: 1000000000/s}
  - {name: route, by: [route], rate: 1000000000/s}
`, bucket.NewMemoryStore(bucket.MemoryOptions{}))
	in := Input{Endpoint: "POST /bench", IP: "10.1.2.3", UserID: "u_1", DeviceID: "d_1", Cost: 1}
	var d Decision
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := e.Decide(ctx, &in, &d); err != nil {
			b.Fatal(err)
		}
	}
}

// blockingStore answers nothing until its caller's context ends.
type blockingStore struct{ *bucket.MemoryStore }

func (blockingStore) Decide(ctx context.Context, _ *bucket.Request, _ *bucket.Result) error {
	<-ctx.Done()
	return fmt.Errorf("%w: %w", bucket.ErrUnavailable, ctx.Err())
}

// TestCallerGoneIsNoStoreFailure: decisions whose callers went away
// before the store answered (canceled contexts) are answered by the
// failure mode but neither counted as store errors nor held against the
// store by the breaker.
func TestCallerGoneIsNoStoreFailure(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	p, err := policy.Parse("p.yaml", []byte(keyPolicy))
	if err != nil {
		t.Fatal(err)
	}
	br := NewBreaker(BreakerOptions{Failures: 2}, nil, nil)
	e, err := New(Options{Store: blockingStore{bucket.NewMemoryStore(bucket.MemoryOptions{})}, Policy: func() *policy.Policy { return p }, Metrics: m, Breaker: br})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var d Decision
		if err := e.Decide(ctx, &Input{Endpoint: "GET /x", IP: "10.0.0.1", Cost: 1}, &d); err != nil {
			t.Fatal(err)
		}
		if d.Outcome != Degraded {
			t.Fatalf("decision %d: outcome %v, want Degraded", i, d.Outcome)
		}
	}
	if st := br.State(); st != BreakerClosed {
		t.Fatalf("breaker %v after 5 canceled callers, want closed", st)
	}
	if v := testutil.ToFloat64(m.StoreErrors); v != 0 {
		t.Fatalf("store errors %v, want 0", v)
	}
	// counted as abandoned, not as degraded (TollgateDegraded alerts on
	// degraded and unavailable: disconnecting clients are no outage)
	for _, limit := range []string{"global", "per-route"} {
		for result, want := range map[string]float64{ResultAbandoned: 5, ResultDegraded: 0, ResultUnavailable: 0} {
			if v := testutil.ToFloat64(m.Decisions.WithLabelValues(limit, "write", result)); v != want {
				t.Errorf("decisions{limit=%q,result=%q} = %v, want %v", limit, result, v, want)
			}
		}
	}
}

// TestBorrowedKeys: over a bare memory store the engine hands out keys that
// alias the Decision's buffer, and decides exactly as over a wrapper (which
// gets copies); the keys a wrapper keeps stay intact across decisions.
func TestBorrowedKeys(t *testing.T) {
	t.Parallel()
	bare := newEngine(t, keyPolicy, bucket.NewMemoryStore(bucket.MemoryOptions{}))
	rs := &recordingStore{MemoryStore: bucket.NewMemoryStore(bucket.MemoryOptions{})}
	wrapped := newEngine(t, keyPolicy, rs)
	if !bare.borrowKeys || wrapped.borrowKeys {
		t.Fatalf("borrowKeys: bare %v, wrapped %v; want true, false", bare.borrowKeys, wrapped.borrowKeys)
	}
	inputs := []Input{
		{Endpoint: "POST /auth/login", IP: "198.51.100.7", DeviceID: "d 1", Account: "alice@example.com", Cost: 1},
		{Endpoint: "GET /feed", IP: "198.51.100.8", UserID: "u}1", DeviceID: "d 1", Cost: 1},
		{Endpoint: "POST /auth/login", IP: "2001:db8::1", Account: "bob", Cost: 2},
	}
	t0 := time.Unix(1700000000, 0)
	var db, dw Decision
	var kept []string
	for i := range 60 {
		a := inputs[i%len(inputs)]
		a.Now = t0.Add(time.Duration(i) * 100 * time.Millisecond)
		b := a
		if err := bare.Decide(context.Background(), &a, &db); err != nil {
			t.Fatal(err)
		}
		if err := wrapped.Decide(context.Background(), &b, &dw); err != nil {
			t.Fatal(err)
		}
		if db.Outcome != dw.Outcome || db.Binding.Name != dw.Binding.Name || db.Limit != dw.Limit ||
			db.Remaining != dw.Remaining || !db.Reset.Equal(dw.Reset) || db.RetryAfter != dw.RetryAfter {
			t.Fatalf("decision %d: bare %v %d/%d retry %v, wrapped %v %d/%d retry %v", i,
				db.Outcome, db.Remaining, db.Limit, db.RetryAfter, dw.Outcome, dw.Remaining, dw.Limit, dw.RetryAfter)
		}
		if i == 0 {
			kept = append(kept, rs.req.Locks...)
			for _, l := range rs.req.Limits {
				kept = append(kept, l.Key)
			}
		}
	}
	want := []string{"tg:{account:alice@example.com}:l", "tg:{ip:198.51.100.7}:l", "tg:{global}:b:global",
		"tg:{ip:198.51.100.7}:b:login-ip|POST%20/auth/login", "tg:{route:POST%20/auth/login}:b:per-route",
		"tg:{account:alice@example.com}:b:acct|POST%20/auth/login"}
	if !slices.Equal(kept, want) {
		t.Errorf("keys kept from the first decision: %q, want %q", kept, want)
	}
}
