package middleware_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/middleware"
	"github.com/tollgate-dev/tollgate/policy"
)

func ExampleNew() {
	p, err := policy.Parse("inline.yaml", []byte(`version: 1
limits:
  - {name: per-ip, by: [ip], rate: 2/min}
`))
	if err != nil {
		panic(err)
	}
	eng, err := engine.New(engine.Options{
		Store:  bucket.NewMemoryStore(bucket.MemoryOptions{}),
		Policy: func() *policy.Policy { return p },
	})
	if err != nil {
		panic(err)
	}
	clientIP := middleware.RemoteIP([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")})
	limit, err := middleware.New(middleware.Options{
		Engine: eng, // or LimiterURL: "http://127.0.0.1:8080"
		Identify: func(r *http.Request) (middleware.Identity, bool) {
			return middleware.Identity{IP: clientIP(r), DeviceID: r.Header.Get("X-Device-Id")}, true
		},
	})
	if err != nil {
		panic(err)
	}
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	}))

	for i := 0; i < 3; i++ {
		r := httptest.NewRequest("GET", "/v1/items", nil)
		r.RemoteAddr = "10.0.0.1:4000" // a trusted load balancer
		r.Header.Set("X-Forwarded-For", "198.51.100.7")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header()["X-RateLimit-Remaining"][0]) // written in the contract's spelling, not canonicalised
	}
	// Output:
	// 200 1
	// 200 0
	// 429 0
}
