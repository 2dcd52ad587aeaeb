package service

import (
	"io"
	"net/http"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// TestNGINXAuthRequestRefusedIdentity (6.4, 6.10): a request the limiter
// refuses with 400 (here two X-User-Id headers, which any client can
// send) reaches the client behind NGINX's auth_request as the 400
// envelope, not as NGINX's own 500: with ?status=403 every answer that is
// not 2xx is a 403 carrying the real status and the envelope, since
// auth_request turns any status but 2xx, 401 and 403 into a 500 (and
// drops the envelope).
func TestNGINXAuthRequestRefusedIdentity(t *testing.T) {
	t.Parallel()
	limiter, up, upstream := startGatewayLimiter(t)
	g := testenv.StartNGINX(t, func(port int, dir string) string { return nginxConf(port, dir, limiter, upstream) })
	req, _ := http.NewRequest("GET", "http://"+g.Addr+"/feed", nil)
	req.Header["X-User-Id"] = []string{"u_1", "u_2"}
	req.Header.Set("X-Forwarded-For", "198.51.100.20")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	wantGW(t, g, gwResponse{resp.StatusCode, resp.Header, string(b)}, 400, `{"error":{"code":"BAD_REQUEST","message":"header \"X-User-Id\" is given more than once (in some spelling); send it once"`,
		"Content-Type", "application/json")
	if s := up.seen(); s != "" {
		t.Fatalf("the upstream saw %s", s)
	}
}
