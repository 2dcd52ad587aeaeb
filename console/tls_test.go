package console_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/api"
	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/console"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
)

// TestSessionCookieSecureOverTLS serves the console over TLS: the
// session cookie is then Secure as well.
func TestSessionCookieSecureOverTLS(t *testing.T) {
	t.Parallel()
	store := bucket.NewMemoryStore(bucket.MemoryOptions{})
	p := policy.Default()
	reg := prometheus.NewRegistry()
	eng, err := engine.New(engine.Options{Store: store, Policy: func() *policy.Policy { return p }, Metrics: engine.NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Options{Engine: eng, AdminToken: adminToken, Store: store, Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	c, err := console.New(console.Options{AdminToken: adminToken, API: srv, CheckToken: srv.CheckAdminToken, Counters: console.NewCounters(reg)})
	if err != nil {
		t.Fatal(err)
	}
	srv.Handle("/console/", c)
	ts := httptest.NewTLSServer(srv)
	defer ts.Close()
	client := ts.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	client.Timeout = 10 * time.Second
	resp, err := client.PostForm(ts.URL+"/console/signin", url.Values{"token": {adminToken}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	sc := resp.Header.Get("Set-Cookie")
	for _, want := range []string{"tollgate_console=", "; Secure", "; HttpOnly", "; SameSite=Strict", "; Max-Age=43200", "; Path=/console/"} {
		if !strings.Contains(sc, want) {
			t.Fatalf("Set-Cookie %q lacks %q", sc, want)
		}
	}
}
