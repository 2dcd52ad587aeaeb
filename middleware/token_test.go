package middleware_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/middleware"
)

const tokenPolicy = `version: 1
limits:
  - {name: device, by: [device], rate: 10/min}
risk:
  attestation: {verified_multiplier: 2, unverified_multiplier: 0.5}
`

// identifyToken is identify plus the device token header.
func identifyToken(r *http.Request) (middleware.Identity, bool) {
	id, ok := identify(r)
	id.DeviceToken = r.Header.Get("X-Device-Token")
	return id, ok
}

// TestDeviceTokens (6.3): in direct mode the middleware verifies the
// device token with the limiters' key; a copied device id without it is
// unverified. In remote mode it sends the token to the limiter.
func TestDeviceTokens(t *testing.T) {
	t.Parallel()
	tokens, err := attestation.NewTokens([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok := tokens.Issue("d1", now.Add(time.Hour))
	h, _ := build(t, middleware.Options{Engine: directEngine(t, tokenPolicy, now), DeviceTokens: tokens, Identify: identifyToken})
	for _, c := range []struct{ device, token, want string }{
		{"d1", tok, "20"},
		{"d1", "", "5"},
		{"d2", tok, "5"},
	} {
		w := serve(h, "GET", "/x", "198.51.100.7", "", "X-Device-Id", c.device, "X-Device-Token", c.token)
		if got := field(w.Header(), "X-RateLimit-Limit"); got != c.want {
			t.Errorf("device %s token %q: limit %s, want %s", c.device, c.token, got, c.want)
		}
	}

	f := &fakeLimiter{status: 200, body: `{"allowed":true}`}
	// a generous timeout: under a loaded machine the default 100 ms
	// passed before the check was sent, and the middleware failed open
	rh, _ := build(t, middleware.Options{LimiterURL: startFake(t, f), Timeout: 5 * time.Second, Identify: identifyToken})
	serve(rh, "GET", "/x", "198.51.100.7", "", "X-Device-Id", "d1", "X-Device-Token", tok)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) != 1 || !strings.Contains(f.reqs[0].body, `"device_id":"d1","device_token":"`+tok+`"`) {
		t.Fatalf("remote check body %+v", f.reqs)
	}
}
