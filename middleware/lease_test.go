package middleware_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/middleware"
)

// onePolicy admits one request in flight per IP.
const onePolicy = `version: 1
limits:
  - {name: one, by: [ip], concurrency: 1}
`

// TestReleasesConcurrency: the middleware holds a request's concurrency
// slot while the wrapped handler runs (a second request meanwhile is 429
// with kind concurrency) and releases it when the handler returns, in
// direct and remote mode.
func TestReleasesConcurrency(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"direct", "remote"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			o := middleware.Options{Identify: identify, Timeout: 5 * time.Second}
			if mode == "direct" {
				o.Engine = directEngine(t, onePolicy, time.Now())
			} else {
				o.LimiterURL = startLimiter(t, onePolicy)
			}
			mw, err := middleware.New(o)
			if err != nil {
				t.Fatal(err)
			}
			var h http.Handler
			var inner int
			var innerBody string
			h = mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/outer" {
					// while this request holds the slot, another is refused
					in := serve(h, "GET", "/inner", "192.0.2.9", "")
					inner, innerBody = in.Code, in.Body.String()
				}
				_, _ = w.Write([]byte("ok"))
			}))
			if w := serve(h, "GET", "/outer", "192.0.2.9", ""); w.Code != 200 {
				t.Fatalf("outer: %d %s", w.Code, w.Body)
			}
			if inner != 429 || !strings.Contains(innerBody, `"kind":"concurrency"`) {
				t.Fatalf("inner while the outer ran: %d %s", inner, innerBody)
			}
			// released when the handler returned: the next ones pass, one at a time
			for i := 0; i < 3; i++ {
				if w := serve(h, "GET", "/after", "192.0.2.9", ""); w.Code != 200 {
					t.Fatalf("after %d: %d %s", i, w.Code, w.Body)
				}
			}
		})
	}
}
