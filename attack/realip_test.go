package attack

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tollgate-dev/tollgate/service"
)

// Attack: behind the load balancer, the client adds headers that name an
// address of its choice (an internal one, a victim's): X-Real-IP and
// True-Client-IP, and X_Forwarded_For, which CGI, WSGI and Rack servers
// read as X-Forwarded-For. The limiter decided on the right address and
// rewrote X-Forwarded-For, but forwarded these as written, so an upstream
// that reads the client's address from them (chi's middleware.RealIP
// takes True-Client-IP, then X-Real-IP; NGINX's real_ip_header X-Real-IP;
// Echo and Gin read X-Real-IP) logged, allow-listed or limited the address
// the attacker chose, as TestAttackForwardedForSpoofReachesUpstream's
// upstream did.
// Defence: a header that names the client's address reaches the upstream
// only as the address the limiter decided on; other spellings of the
// X-Forwarded headers the limiter sets are dropped.
func TestAttackClientAddressHeadersReachUpstream(t *testing.T) {
	t.Parallel()
	seen := make(chan http.Header, 10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
	}))
	t.Cleanup(up.Close)
	tg := start(t, func(c *service.Config) { c.Upstream = up.URL })
	const forged = "10.0.0.1"
	h := from("203.0.113.77")
	for _, name := range []string{"X-Real-Ip", "True-Client-Ip", "X-Client-Ip", "Cf-Connecting-Ip", "X_Forwarded_For", "X_Real_IP", "X_Forwarded_Host"} {
		h[name] = []string{forged}
	}
	if code, body := do(t, "GET", tg.public+"/feed", "", h); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	got := <-seen
	for name, vs := range got {
		for _, v := range vs {
			if v == forged {
				t.Errorf("the upstream got %s: %s, the address the client wrote", name, v)
			}
		}
	}
	for _, name := range []string{"X-Real-Ip", "True-Client-Ip"} {
		if vs := got.Values(name); len(vs) != 1 || vs[0] != "203.0.113.77" {
			t.Errorf("the upstream got %s %q; want the address decided on, 203.0.113.77", name, vs)
		}
	}
	if vs := got.Values("X-Forwarded-For"); len(vs) != 1 || vs[0] != "203.0.113.77, 127.0.0.1" {
		t.Errorf("the upstream got X-Forwarded-For %q", vs)
	}
	// a request without them gets none
	if code, body := do(t, "GET", tg.public+"/feed", "", from("203.0.113.78")); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	if got := <-seen; got.Get("X-Real-Ip") != "" || got.Get("True-Client-Ip") != "" {
		t.Errorf("the upstream got X-Real-IP %q, True-Client-IP %q on a request that had neither", got.Get("X-Real-Ip"), got.Get("True-Client-Ip"))
	}
}
