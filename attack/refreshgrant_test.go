package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/service"
)

// oauthUpstream answers POST /token as an OAuth token endpoint answers a
// refresh grant (200 for the refresh token's owner, whatever else the body
// says) and POST /auth/login as strictUpstream, naming the account that
// logged in in X-Login-Account.
func oauthUpstream(t *testing.T) setup {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Username, Password string
			RefreshToken       string `json:"refresh_token"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		switch {
		case r.URL.Path == "/token" && body.RefreshToken == "mallory-refresh":
			w.Header().Set("X-Login-Account", "mallory")
		case r.URL.Path == "/auth/login" && body.Password == "right":
			w.Header().Set("X-Login-Account", body.Username)
		default:
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = fmt.Fprint(w, `{"token":"t"}`)
	}))
	t.Cleanup(srv.Close)
	return func(c *service.Config) { c.Upstream = srv.URL }
}

// TestAttackRefreshGrantEnrolsDeviceInAnyAccount: a 2xx on a class auth
// route is reported as a login_succeeded for the account the body names,
// and that makes the request's attested device a trusted device of it
// (7.1: exempt from its lockouts, a budget of its own). The example
// policy's POST /token is class auth, and a refresh grant authenticates
// by its refresh token, ignoring any username: mallory refreshed his own
// session with "username": "alice" in the body from his attested phone,
// and his phone became alice's trusted device. With
// identity.account_response_header the upstream names the account that
// logged in, the login_succeeded is reported for it alone, and the
// header does not reach the client: mallory's phone is his own trusted
// device, never alice's.
func TestAttackRefreshGrantEnrolsDeviceInAnyAccount(t *testing.T) {
	t.Parallel()
	tg := start(t, withPolicy(t, func(p string) string {
		return insertAfter("  account_body_field: username", "  account_response_header: X-Login-Account\n")(trustPolicy)
	}), oauthUpstream(t))
	phone := []string{"X-Device-Id", "mallory-phone", "X-Device-Token", deviceToken(t, "mallory-phone")}
	st, h, body := doH(t, "POST", tg.public+"/token", `{"username":"alice","refresh_token":"mallory-refresh"}`, from("203.0.113.66", phone...))
	if !strings.Contains(body, `"token"`) || h.Get("X-Login-Account") != "" {
		t.Fatalf("the refresh: %d %s, X-Login-Account %q (the limiter's to read, not the client's)", st, body, h.Get("X-Login-Account"))
	}
	eventually(t, 10*time.Second, func() string {
		if _, err := tg.rdb.ZScore(context.Background(), bucket.TrustKey(tg.prefix, "account", "mallory"), "mallory-phone").Result(); err != nil {
			return "mallory's phone is not yet his own trusted device: " + err.Error()
		}
		return ""
	})
	tg.syncRisk(t)
	if n, err := tg.rdb.ZCard(context.Background(), bucket.TrustKey(tg.prefix, "account", "alice")).Result(); err != nil || n != 0 {
		t.Fatalf("alice's trusted devices after mallory's refresh naming her: %d (%v), want none", n, err)
	}
}
