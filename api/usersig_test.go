package api

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/internal/usersig"
	"github.com/tollgate-dev/tollgate/policy"
)

// newSigFixture serves forward auth with a signed user header, the
// identity lines extra added; the keys are K_NEW=new and K_OLD=old.
func newSigFixture(t *testing.T, extra string) *fixture {
	t.Helper()
	p, err := policy.Parse("sig.yaml", []byte(`version: 1
identity:
  trusted_proxies: [192.0.2.1]
  user_header: X-User-Id
  user_signature_header: X-User-Signature
`+extra+`limits:
  - {name: ip-unauth, by: [ip], rate: 100/min, if: {authenticated: false}}
  - {name: user, by: [user], rate: 100/min, if: {authenticated: true}}
`))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{now: t0, reg: prometheus.NewRegistry()}
	store := bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return f.now }})
	eng, err := engine.New(engine.Options{Store: store, Policy: func() *policy.Policy { return p }, Metrics: engine.NewMetrics(f.reg),
		Clock: func() time.Time { return f.now }})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"K_NEW": "new", "K_OLD": "old"}
	if f.srv, err = New(Options{Engine: eng, Gatherer: f.reg, Now: func() time.Time { return f.now },
		Getenv: func(k string) string { return env[k] }}); err != nil {
		t.Fatal(err)
	}
	return f
}

// authenticated reports whether forward auth took the user header as
// verified (the user limit applied, not ip-unauth).
func (f *fixture) authenticated(t *testing.T, sig string) bool {
	t.Helper()
	w := f.do(t, "GET", "/v1/forward-auth", "", "X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/me",
		"X-Forwarded-For", "198.51.100.7", "X-User-Id", "u_42", "X-User-Signature", sig)
	if w.Code != 200 {
		t.Fatalf("forward auth: %d %s", w.Code, w.Body)
	}
	switch p := field(w.Header(), "RateLimit-Policy"); p {
	case `"user";q=100;w=60`:
		return true
	case `"ip-unauth";q=100;w=60`:
		return false
	default:
		t.Fatalf("RateLimit-Policy %q: %s %v", p, w.Body, w.Header())
		return false
	}
}

func TestUserSignatureTimestamped(t *testing.T) {
	t.Parallel()
	f := newSigFixture(t, "  user_signature_key_env: [K_NEW, K_OLD]\n  user_signature_max_age: 2m\n")
	for _, c := range []struct {
		name string
		sig  string
		want bool
	}{
		{"bare, new key", usersig.SignBare([]byte("new"), "u_42"), true},
		{"bare, old key (rotation)", usersig.SignBare([]byte("old"), "u_42"), true},
		{"bare, unknown key", usersig.SignBare([]byte("other"), "u_42"), false},
		{"timestamped now", usersig.Sign([]byte("new"), "u_42", t0), true},
		{"timestamped, old key", usersig.Sign([]byte("old"), "u_42", t0), true},
		{"timestamped 2m ago", usersig.Sign([]byte("new"), "u_42", t0.Add(-2*time.Minute)), true},
		{"timestamped 2m1s ago: replayed", usersig.Sign([]byte("new"), "u_42", t0.Add(-2*time.Minute-time.Second)), false},
		{"timestamped 2m ahead", usersig.Sign([]byte("new"), "u_42", t0.Add(2*time.Minute)), true},
		{"timestamped 2m1s ahead", usersig.Sign([]byte("new"), "u_42", t0.Add(2*time.Minute+time.Second)), false},
		{"timestamped for another user", usersig.Sign([]byte("new"), "u_43", t0), false},
		{"garbage", "t=1,v1=zz", false},
	} {
		if got := f.authenticated(t, c.sig); got != c.want {
			t.Errorf("%s: authenticated %v, want %v", c.name, got, c.want)
		}
	}
	// the limiter's clock decides: the same header expires as it moves on
	sig := usersig.Sign([]byte("new"), "u_42", t0)
	f.now = t0.Add(3 * time.Minute)
	if f.authenticated(t, sig) {
		t.Errorf("a header signed 3m before the clock verified (max age 2m)")
	}
}

func TestUserSignatureRequireTimestamp(t *testing.T) {
	t.Parallel()
	f := newSigFixture(t, "  user_signature_key_env: K_NEW\n  user_signature_require_timestamp: true\n")
	if f.authenticated(t, usersig.SignBare([]byte("new"), "u_42")) {
		t.Errorf("the bare form verified with user_signature_require_timestamp")
	}
	if !f.authenticated(t, usersig.Sign([]byte("new"), "u_42", t0.Add(-time.Minute))) {
		t.Errorf("a timestamped header 1m old did not verify (default max age 5m)")
	}
	if f.authenticated(t, usersig.Sign([]byte("new"), "u_42", t0.Add(-6*time.Minute))) {
		t.Errorf("a timestamped header 6m old verified (default max age 5m)")
	}
}
