package service

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// gatewayToken is the limiter's --api-token in the gateway token tests.
const gatewayToken = "gw-api-token"

// authUpstream is an upstream that records the Authorization header of
// every request it served.
type authUpstream struct {
	mu    sync.Mutex
	auths []string
}

func (u *authUpstream) start(t *testing.T) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.auths = append(u.auths, r.Header.Get("Authorization"))
		u.mu.Unlock()
		_, _ = io.WriteString(w, "hello from upstream")
	}))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

// tokenScenario: with --api-token, the gateway configured as
// docs/gateways.md says sends the token to /v1/forward-auth in place of
// the client's own Authorization, which the app still gets unchanged;
// the limit applies as without a token.
func tokenScenario(t *testing.T, g *testenv.Gateway, up *authUpstream) {
	t.Helper()
	feed := []string{"X-User-Id", "u_1", "X-Forwarded-For", "198.51.100.7", "Authorization", "Bearer the-users-own-jwt"}
	for range 3 {
		wantGW(t, g, gwDo(t, g.Addr, "GET", "/feed", feed...), 200, "hello from upstream")
	}
	wantGW(t, g, gwDo(t, g.Addr, "GET", "/feed", feed...), 429, `{"error":{"code":"RATE_LIMITED"`)
	up.mu.Lock()
	defer up.mu.Unlock()
	if got := strings.Join(up.auths, ","); got != "Bearer the-users-own-jwt,Bearer the-users-own-jwt,Bearer the-users-own-jwt" {
		t.Errorf("the app got Authorization %q; want the client's own, three times", got)
	}
}

func startTokenLimiter(t *testing.T) (string, *authUpstream, string) {
	t.Helper()
	r, _ := start(t, Config{ConfigPath: writePolicy(t, gatewayPolicy), APIToken: gatewayToken})
	up := &authUpstream{}
	return r.Addr, up, up.start(t)
}

// TestCaddyForwardAuthAPIToken: Caddy's forward_auth with header_up
// Authorization (docs/gateways.md).
func TestCaddyForwardAuthAPIToken(t *testing.T) {
	t.Parallel()
	limiter, up, upstream := startTokenLimiter(t)
	g := testenv.StartCaddy(t, func(port int) string {
		return strings.Replace(caddyfile(port, limiter, upstream), "\t\turi /v1/forward-auth\n",
			"\t\turi /v1/forward-auth\n\t\theader_up Authorization \"Bearer "+gatewayToken+"\"\n", 1)
	})
	tokenScenario(t, g, up)
}

// TestNGINXAuthRequestAPIToken: NGINX's auth_request location with
// proxy_set_header Authorization (docs/gateways.md).
func TestNGINXAuthRequestAPIToken(t *testing.T) {
	t.Parallel()
	limiter, up, upstream := startTokenLimiter(t)
	g := testenv.StartNGINX(t, func(port int, dir string) string {
		return strings.Replace(nginxConf(port, dir, limiter, upstream), "\t\tproxy_method GET;\n",
			"\t\tproxy_method GET;\n\t\tproxy_set_header Authorization \"Bearer "+gatewayToken+"\";\n", 1)
	})
	tokenScenario(t, g, up)
}
