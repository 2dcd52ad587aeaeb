package service

import (
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// gatewayToken is the limiter's --api-token in the gateway token tests.
const gatewayToken = "gw-api-token"

// tokenScenario: with --api-token, the gateway configured as
// docs/gateways.md says sends the token to /v1/forward-auth in place of
// the client's own Authorization, which the app still gets unchanged;
// the limit applies as without a token.
func tokenScenario(t *testing.T, g *testenv.Gateway, up *upstreamLog) {
	t.Helper()
	feed := []string{"X-User-Id", "u_1", "X-Forwarded-For", "198.51.100.7", "Authorization", "Bearer the-users-own-jwt"}
	for range 3 {
		wantGW(t, g, gwDo(t, g.Addr, "GET", "/feed", feed...), 200, "hello from upstream")
	}
	wantGW(t, g, gwDo(t, g.Addr, "GET", "/feed", feed...), 429, `{"error":{"code":"RATE_LIMITED"`)
	if got := up.authorizations(); got != "Bearer the-users-own-jwt,Bearer the-users-own-jwt,Bearer the-users-own-jwt" {
		t.Errorf("the app got Authorization %q; want the client's own, three times", got)
	}
}

func startTokenLimiter(t *testing.T) (string, *upstreamLog, string) {
	t.Helper()
	r, _ := start(t, Config{ConfigPath: writePolicy(t, gatewayPolicy), APIToken: gatewayToken})
	up := &upstreamLog{}
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
