package attack

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/bucket"
)

// Attack: ten forged login failures posted to /v1/report on the public
// port lock the victim out for 15 minutes.
// Defence (6.1): the public port serves none of the limiter's own API;
// /v1/report there is the upstream's path, forwarded like any other.
func TestAttackReportOnPublicPortLocksVictim(t *testing.T) {
	t.Parallel()
	tg := start(t)
	for i := 0; i < 10; i++ {
		do(t, "POST", tg.public+"/v1/report", `{"type":"login_failed","account":"victim"}`, from("203.0.113.5"))
	}
	if n := tg.up.reached("POST /v1/report"); n != 10 {
		t.Errorf("the upstream saw %d of the 10 POST /v1/report; want 10 (the path is the API's)", n)
	}
	tg.syncRisk(t)
	if code, body := do(t, "POST", tg.public+"/auth/login", `{"username":"victim","password":"right"}`, from("198.51.100.1")); code != 200 {
		t.Fatalf("the victim's own login: %d %s; want 200 (never locked)", code, body)
	}
}

// Attack: /v1/check on the public port with cost 5, twice, spends the
// victim's login budget (login-account, 5/min): the victim cannot log in.
// Defence (6.1): /v1/check is served on the API port only.
func TestAttackCheckCostOnPublicPortDrainsVictimBudget(t *testing.T) {
	t.Parallel()
	tg := start(t)
	for i := 0; i < 2; i++ {
		do(t, "POST", tg.public+"/v1/check", `{"endpoint":"POST /auth/login","ip":"198.51.100.1","account":"victim","cost":5}`, from("203.0.113.5"))
	}
	if n := tg.up.reached("POST /v1/check"); n != 2 {
		t.Errorf("the upstream saw %d of the 2 POST /v1/check; want 2", n)
	}
	if code, body := do(t, "POST", tg.public+"/auth/login", `{"username":"victim","password":"right"}`, from("198.51.100.1")); code != 200 {
		t.Fatalf("the victim's own login: %d %s; want 200 (budget untouched)", code, body)
	}
}

// Attack: the attacker attests a real device of its own, then posts a
// forged login_succeeded for the victim's account from it to the public
// port: the device joins the victim's trusted devices, exempt from the
// account's lockouts (exempt_attested), and can guess on.
// Defence (6.1): /v1/report is not served on the public port.
func TestAttackForgedLoginSucceededTrustsAttackerDevice(t *testing.T) {
	t.Parallel()
	tg := start(t)
	now := time.Now()
	devices := attestation.NewRedisDevices(tg.rdb, tg.prefix)
	if err := devices.Put(context.Background(), "attacker-dev", attestation.Status{Platform: attestation.PlatformAndroid,
		Verified: true, VerifiedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	do(t, "POST", tg.public+"/v1/report", `{"type":"login_succeeded","account":"victim","device_id":"attacker-dev"}`, from("203.0.113.5"))
	tg.syncRisk(t)
	trusted, err := tg.rdb.ZRange(context.Background(), bucket.TrustKey(tg.prefix, "account", "victim"), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(trusted, "attacker-dev") {
		t.Fatalf("the attacker's device is among the victim's trusted devices: %v", trusted)
	}
	if n := tg.up.reached("POST /v1/report"); n != 1 {
		t.Errorf("the upstream saw %d POST /v1/report; want 1", n)
	}
}

// Attack: the admin API and the metrics answer on the public port (the
// token is all that stands between the internet and every override; the
// metrics name limits, routes and internals).
// Defence (6.1): /v1/admin/*, /v1/forward-auth and /metrics are on the API
// port only.
func TestAttackAdminAndMetricsOnPublicPort(t *testing.T) {
	t.Parallel()
	tg := start(t)
	for _, p := range []string{"/metrics", "/v1/admin/offenders", "/v1/admin/subjects/account/victim", "/v1/forward-auth"} {
		_, h, body := doH(t, "GET", tg.public+p, "", from("203.0.113.5", "Authorization", "Bearer guess"))
		if h.Get("X-Upstream") != "yes" || strings.Contains(body, "tollgate_") || code(body) == "UNAUTHORIZED" {
			t.Errorf("GET %s on the public port was answered by the limiter: %.120s", p, body)
		}
	}
	if code, _ := do(t, "GET", tg.api+"/metrics", "", nil); code != 200 {
		t.Errorf("GET /metrics on the API port: %d", code)
	}
}

// Attack (on availability): the API's own /v1/... paths, such as
// /v1/users/me, never reach it: the proxy answers them 404.
// Defence (6.1): every path but health and attestation is forwarded.
func TestAttackProxySwallowsUpstreamV1Paths(t *testing.T) {
	t.Parallel()
	tg := start(t)
	for _, p := range []string{"/v1/users/me", "/v1/check/history", "/v1/attestations"} {
		if code, h, body := doH(t, "GET", tg.public+p, "", from("198.51.100.1")); code != 200 || h.Get("X-Upstream") != "yes" {
			t.Errorf("GET %s: %d %.120s; want the upstream's 200", p, code, body)
		}
	}
	if code, _ := do(t, "GET", tg.public+"/healthz", "", nil); code != 200 {
		t.Errorf("GET /healthz on the public port: %d", code)
	}
}

// guess sends one login guess for a spelling of the body from a fresh
// address (the attacker has many) and returns the status.
func guess(t *testing.T, tg *target, i int, path, contentType, body string) int {
	t.Helper()
	h := from(fmt.Sprintf("198.18.%d.%d", i/250, 1+i%250), "Content-Type", contentType)
	code, _ := do(t, "POST", tg.public+path, body, h)
	return code
}

// Attack: login guesses spell the account field so the limiter misses it
// and Go's encoding/json still reads it ("Username", "USERNAME", the
// long s of "uſername", an escaped key), or send it as a form: the
// per-account limit (5/min) and the lockout never apply; 30 of 30 reach
// the upstream.
// Defence (6.4): the proxy reads the body as the upstream does: JSON keys
// case-insensitively (Unicode folding, as encoding/json), form bodies too.
func TestAttackAccountFieldSpellingEvadesAccountLimit(t *testing.T) {
	t.Parallel()
	tg := start(t)
	same := func(v string, i int) string { return v }
	cases := []struct {
		name, contentType, body string
		spell                   func(victim string, i int) string
	}{
		{"capital", "application/json", `{"Username":"%s","password":"guess"}`, same},
		{"upper", "application/json", `{"USERNAME":"%s","password":"guess"}`, same},
		{"long-s", "application/json", `{"uſername":"%s","password":"guess"}`, same},
		{"escaped", "application/json", `{"\u0055sername":"%s","password":"guess"}`, same},
		{"form", "application/x-www-form-urlencoded", `username=%s&password=guess`, same},
		{"account-case", "application/json", `{"username":"%s","password":"guess"}`, func(v string, i int) string {
			return [...]string{v, strings.ToUpper(v), " " + v + " ", strings.ToUpper(v[:1]) + v[1:]}[i%4]
		}},
	}
	for ci, c := range cases {
		victim := "victim-" + c.name
		allowed := 0
		for i := 0; i < 30; i++ {
			if guess(t, tg, ci*30+i, "/auth/login", c.contentType, fmt.Sprintf(c.body, c.spell(victim, i))) == http.StatusUnauthorized {
				allowed++
			}
		}
		if allowed > 5 {
			t.Errorf("%s: %d of 30 guesses on %q were answered by the upstream; want at most 5 (login-account)", c.name, allowed, victim)
		}
	}
}

// Attack: the account field twice, in two spellings: the limiter counts
// the decoy, Go's encoding/json keeps the last (the victim).
// Defence (6.4): a body that carries the field more than once is 400.
func TestAttackDuplicateAccountField(t *testing.T) {
	t.Parallel()
	tg := start(t)
	for i, body := range []string{
		`{"username":"decoy","Username":"victim","password":"guess"}`,
		`{"username":"decoy","username":"victim","password":"guess"}`,
	} {
		code, resp := do(t, "POST", tg.public+"/auth/login", body, from(fmt.Sprintf("198.18.9.%d", i+1)))
		if code != http.StatusBadRequest || !strings.Contains(resp, "BAD_REQUEST") {
			t.Errorf("%s: %d %.120s; want 400 BAD_REQUEST", body, code, resp)
		}
	}
	form := from("198.18.9.9", "Content-Type", "application/x-www-form-urlencoded")
	if code, resp := do(t, "POST", tg.public+"/auth/login", "username=decoy&username=victim&password=guess", form); code != http.StatusBadRequest {
		t.Errorf("form with the field twice: %d %.120s; want 400", code, resp)
	}
	if n := tg.up.attemptsOn("victim"); n != 0 {
		t.Errorf("the upstream saw %d guesses on the victim; want 0", n)
	}
}

// Attack: the account moves from the form body to the query string
// (POST /auth/login?username=victim with the password alone in the
// body): frameworks that merge the two (Go's FormValue, Rails' params,
// Laravel's input(), Spring's @RequestParam) read the victim, the limiter
// read no account, so login-account (5/min) never applied.
// Defence (6.4): the query string is read as the body is, and a field
// given in both is given twice: 400.
func TestAttackAccountInQueryString(t *testing.T) {
	t.Parallel()
	tg := start(t)
	allowed := 0
	for i := 0; i < 30; i++ {
		if guess(t, tg, i, "/auth/login?username=victim-query", "application/x-www-form-urlencoded", "password=guess") == http.StatusUnauthorized {
			allowed++
		}
	}
	if allowed > 5 {
		t.Errorf("%d of 30 guesses with the account in the query string were answered by the upstream; want at most 5 (login-account)", allowed)
	}
	code, resp := do(t, "POST", tg.public+"/auth/login?username=victim-query", "username=decoy&password=guess",
		from("198.18.10.1", "Content-Type", "application/x-www-form-urlencoded"))
	if code != http.StatusBadRequest {
		t.Errorf("the field in the query and the body: %d %.120s; want 400", code, resp)
	}
}

// Attack: POST /auth/login/ (trailing slash), //auth/./login or
// /auth/%6cogin are classed "write", not "auth": no login limit applies,
// and the framework behind routes them to the login handler all the same.
// Defence (6.4): the path is normalised before route matching, and the
// normalised request is the one forwarded.
func TestAttackPathSpellingEvadesAuthRoute(t *testing.T) {
	t.Parallel()
	tg := start(t)
	for pi, p := range []string{"/auth/login/", "//auth/./login", "/auth/%6cogin", "/auth/x/../login"} {
		victim := fmt.Sprintf("victim-%d", pi)
		allowed := 0
		for i := 0; i < 30; i++ {
			if guess(t, tg, pi*30+i, p, "application/json", `{"username":"`+victim+`","password":"guess"}`) == http.StatusUnauthorized {
				allowed++
			}
		}
		if allowed > 5 {
			t.Errorf("POST %s: %d of 30 guesses reached the upstream; want at most 5", p, allowed)
		}
	}
	if paths := tg.up.seen(); len(paths) == 0 || tg.up.reached("POST /auth/login") != len(paths) {
		t.Errorf("the upstream saw %v; want every request as POST /auth/login", paths)
	}
}

// Attack: a valid X-User-Id of the attacker with its signature, plus a
// second X-User-Id naming the victim: both were forwarded, and an upstream
// reading the last value acts as the victim.
// Defence (6.4): a repeated identity header is 400; the forwarded request
// carries the user header only as the single verified value.
func TestAttackSecondUserHeaderForwarded(t *testing.T) {
	t.Parallel()
	tg := start(t)
	h := from("198.51.100.1", "X-User-Id", "alice", "X-User-Signature", sign("alice"))
	h.Add("X-User-Id", "victim")
	if code, body := do(t, "GET", tg.public+"/feed", "", h); code != http.StatusBadRequest || !strings.Contains(body, "X-User-Id") {
		t.Errorf("two X-User-Id: %d %.160s; want 400 naming the header", code, body)
	}
	for _, name := range []string{"X-User-Signature", "X-Device-Id", "X-Device-Token", "X_User_Id"} {
		h := from("198.51.100.1", "X-User-Id", "alice", "X-User-Signature", sign("alice"), name, "one")
		h.Add(name, "two")
		if code, body := do(t, "GET", tg.public+"/feed", "", h); code != http.StatusBadRequest || !strings.Contains(body, strings.ReplaceAll(name, "_", "-")) {
			t.Errorf("two %s: %d %.160s; want 400 naming the header", name, code, body)
		}
	}
	ok := from("198.51.100.1", "X-User-Id", "alice", "X-User-Signature", sign("alice"))
	if code, body := do(t, "GET", tg.public+"/feed", "", ok); code != 200 {
		t.Fatalf("one signed X-User-Id: %d %s", code, body)
	}
	tg.up.mu.Lock()
	defer tg.up.mu.Unlock()
	for _, vs := range tg.up.users {
		if len(vs) > 1 || (len(vs) == 1 && vs[0] != "alice") {
			t.Errorf("the upstream saw X-User-Id %q; want only the verified alice", vs)
		}
	}
}

// Attack (on the operator): PUT /v1/admin/multipliers/ip/2001:DB8::1 with
// multiplier 0 answers 200 and blocks nothing, because the check keys the
// address as 2001:db8::1 (and ::ffff:192.0.2.99 as 192.0.2.99).
// Defence (6.4): admin ids are checked and canonicalised per subject.
func TestAttackAdminIDSpellingMissesSubject(t *testing.T) {
	t.Parallel()
	tg := start(t)
	admin := bearer(adminToken)
	for _, c := range []struct{ put, client string }{
		{"2001:DB8::1", "2001:db8::1"},
		{"::ffff:192.0.2.99", "192.0.2.99"},
	} {
		if code, body := do(t, "PUT", tg.api+"/v1/admin/multipliers/ip/"+url.PathEscape(c.put), `{"multiplier":0,"ttl":"10m"}`, admin); code != 200 {
			t.Fatalf("PUT ip/%s: %d %s", c.put, code, body)
		}
		if code, body := do(t, "GET", tg.public+"/feed", "", from(c.client)); code != http.StatusTooManyRequests {
			t.Errorf("after blocking ip/%s, a request from %s: %d %.120s; want 429", c.put, c.client, code, body)
		}
	}
	if code, body := do(t, "PUT", tg.api+"/v1/admin/multipliers/asn/AS64500", `{"multiplier":0.5}`, admin); code != 200 || !strings.Contains(body, `"id":"64500"`) {
		t.Errorf("PUT asn/AS64500: %d %.160s; want 200 for asn 64500", code, body)
	}
	if code, body := do(t, "PUT", tg.api+"/v1/admin/multipliers/account/%20Victim@Example.COM", `{"multiplier":0.5}`, admin); code != 200 || !strings.Contains(body, `"id":"victim@example.com"`) {
		t.Errorf("PUT account/ Victim@Example.COM: %d %.160s; want 200 for victim@example.com", code, body)
	}
	for _, bad := range []string{"ip/not-an-ip", "ip/fe80::1%25eth0", "asn/AS-big", "asn/99999999999"} {
		if code, body := do(t, "PUT", tg.api+"/v1/admin/multipliers/"+bad, `{"multiplier":0}`, admin); code != http.StatusBadRequest {
			t.Errorf("PUT %s: %d %.120s; want 400", bad, code, body)
		}
	}
}
