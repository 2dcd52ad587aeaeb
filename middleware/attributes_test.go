package middleware_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/middleware"
)

// attrPolicy limits the free plan to 2 requests a minute per IP.
const attrPolicy = `version: 1
limits:
  - {name: free, by: [ip, attr:plan], rate: 2/min, if: {attr: {plan: [free]}}}
`

func identifyPlan(r *http.Request) (middleware.Identity, bool) {
	id, ok := identify(r)
	if plan := r.Header.Get("X-Plan"); plan != "" {
		id.Attributes = map[string]string{"plan": plan}
	}
	return id, ok
}

// TestAttributes: the Identity's attributes reach the decision, in direct
// mode and through a running limiter's /v1/check.
func TestAttributes(t *testing.T) {
	t.Parallel()
	direct, _ := build(t, middleware.Options{Engine: directEngine(t, attrPolicy, time.Unix(1713522600, 0)), Identify: identifyPlan})
	remote, _ := build(t, middleware.Options{LimiterURL: startLimiter(t, attrPolicy), Identify: identifyPlan, Timeout: 5 * time.Second})
	for name, h := range map[string]http.Handler{"direct": direct, "remote": remote} {
		for i, want := range []int{200, 200, 429} {
			if w := serve(h, "GET", "/", "192.0.2.1", "", "X-Plan", "free"); w.Code != want {
				t.Fatalf("%s: free request %d: %d %s", name, i, w.Code, w.Body)
			}
		}
		w := serve(h, "GET", "/", "192.0.2.1", "", "X-Plan", "paid")
		if w.Code != 200 || field(w.Header(), "X-RateLimit-Limit") != "" {
			t.Fatalf("%s: paid: %d %v", name, w.Code, w.Header())
		}
		if w := serve(h, "GET", "/", "192.0.2.1", "", "X-Plan", "free"); w.Code != 429 || !strings.Contains(w.Body.String(), `"scope":"ip"`) {
			t.Fatalf("%s: %d %s", name, w.Code, w.Body)
		}
	}
}
