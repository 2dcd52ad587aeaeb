package attack

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// check posts a /v1/check body on the API port with the API token and
// returns the status, the Retry-After header and the envelope's
// details.retry_after_ms (0 when there is none).
func (tg *target) check(t *testing.T, body string) (status int, retryAfter string, retryMS int64, errCode string) {
	t.Helper()
	code, h, b := doH(t, "POST", tg.api+"/v1/check", body, bearer(apiToken))
	var env struct {
		Error struct {
			Code    string `json:"code"`
			Details struct {
				RetryAfterMS int64 `json:"retry_after_ms"`
			} `json:"details"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(b), &env)
	return code, h.Get("Retry-After"), env.Error.Details.RetryAfterMS, env.Error.Code
}

// Attack: a client that keeps hammering a limit it has exhausted. The
// first denial comes from the store and names the real wait (login-account
// is 5/min: 12 s until the next token), but the denials the L1 cache then
// answers for --l1-ttl (250 ms) said retry_after_ms of at most 250 and
// Retry-After: 1: the cache answered the time its entry had left to live,
// not the wait. Every client that honours Retry-After (as the docs tell
// apps to) came back 12 times as often, each time costing a store call
// (a retry storm the limiter itself invited).
// Defence: a cached denial answers the store's wait, less the time since
// (the denied cost's exact wait, as the contract says retry_after_ms is).
func TestAttackCachedDenialUndersellsRetryAfter(t *testing.T) {
	t.Parallel()
	tg := start(t)
	body := `{"endpoint":"POST /auth/login","ip":"198.51.100.90","account":"carol"}`
	for i := range 5 {
		if status, _, _, c := tg.check(t, body); status != http.StatusOK {
			t.Fatalf("attempt %d: %d %s; want 200 (login-account allows 5 a minute)", i+1, status, c)
		}
	}
	for i := range 2 {
		status, ra, ms, c := tg.check(t, body)
		if status != http.StatusTooManyRequests || c != "RATE_LIMITED" {
			t.Fatalf("denial %d: %d %s; want 429 RATE_LIMITED", i+1, status, c)
		}
		// 12 s for a token, less the few ms the test has taken
		if ra != "12" || ms < 11_000 || ms > 12_000 {
			t.Errorf("denial %d (%s): Retry-After %s, retry_after_ms %d; want 12 and 11000-12000 (the 12 s until login-account's next token)",
				i+1, []string{"from the store", "from the L1 cache"}[i], ra, ms)
		}
	}
}

// lockAccount reports ten failed logins of account (account-failures'
// threshold) and waits until the check API answers its login
// ACCOUNT_LOCKED.
func (tg *target) lockAccount(t *testing.T, account string) {
	t.Helper()
	tg.report(t, 10, `{"type":"login_failed","account":"`+account+`","ip":"192.0.2.77"}`)
	eventually(t, 10*time.Second, func() string {
		if !tg.lockedOut(t, account) {
			return account + " not locked yet"
		}
		return ""
	})
}

// Attack: the backend asks /v1/check about each login with the request's
// URI as the client sent it (api.md said "the path may carry a query
// string"), and the attacker appends one: "POST /auth/login?next=/" is
// the upstream's login, but the route globs saw the query, so it was
// class write: no login-ip, no login-account, and no lockout: a locked
// account's guesses went on. Forward auth and Envoy drop the query before
// routing; the check API did not.
// Defence: the check API routes the endpoint's path without its query
// string (and fragment), as every other surface does.
func TestAttackCheckQueryStringEscapesLockout(t *testing.T) {
	t.Parallel()
	tg := start(t)
	tg.lockAccount(t, "dave")
	for i, ep := range []string{"POST /auth/login?next=%2Fhome", "POST /auth/login?", "POST /auth/login#x"} {
		body := fmt.Sprintf(`{"endpoint":%q,"ip":"198.51.100.%d","account":"dave"}`, ep, 100+i)
		if status, _, _, c := tg.check(t, body); status != http.StatusTooManyRequests || c != "ACCOUNT_LOCKED" {
			t.Errorf("%s for locked account dave: %d %q; want 429 ACCOUNT_LOCKED", ep, status, c)
		}
	}
}

// Attack: the backend passes the path as the client sent it, escaped
// (Spring's getRequestURI, Node's req.url), and the attacker encodes a
// letter or the slash: Spring and Go decode before routing and serve
// "POST /auth/%6cogin" and "POST /auth%2Flogin" as the login, but the
// check API matched routes on the escaped text, so they were class write:
// a locked account's guesses went on (forward auth and Envoy decode, 6.4).
// Defence: the check API routes the path as forward auth does
// (policy.RoutePath: unreserved escapes and %2F decoded, cleaned again).
func TestAttackCheckEncodedPathEscapesLockout(t *testing.T) {
	t.Parallel()
	tg := start(t)
	tg.lockAccount(t, "erin")
	for i, ep := range []string{"POST /auth/%6cogin", "POST /auth%2Flogin", "POST /%61uth/login", "POST /auth/x/%2E%2E/login"} {
		body := fmt.Sprintf(`{"endpoint":%q,"ip":"198.51.100.%d","account":"erin"}`, ep, 110+i)
		if status, _, _, c := tg.check(t, body); status != http.StatusTooManyRequests || c != "ACCOUNT_LOCKED" {
			t.Errorf("%s for locked account erin: %d %q; want 429 ACCOUNT_LOCKED", ep, status, c)
		}
	}
}

// Attack: forward auth reads the login's account from identity's
// account_header, and the attacker pads the account it guesses at with
// white space that the app trims (Python's str.strip, which Django's
// forms apply, Go's strings.TrimSpace and Java's String.strip trim
// U+3000 IDEOGRAPHIC SPACE, as policy.NormalizeAccount does): "frank"
// and 90 of them is 275 bytes, over the 256 an id may have, so the
// limiter dropped the account before normalising it, and the login was
// decided with none: no login-account, no lockout, while the app logged
// the guess in as frank. Envoy's account entry normalised first and kept
// it.
// Defence: the account is normalised before it is bounded, on every way
// in, as Envoy's entry does; what is too long once normalised is still
// dropped.
func TestAttackPaddedAccountHeaderEscapesLockout(t *testing.T) {
	t.Parallel()
	tg := start(t, withPolicy(t, insertAfter("account_body_field: username", "  account_header: X-Account\n")))
	tg.lockAccount(t, "frank")
	padded := "frank" + strings.Repeat("\u3000", 90)
	h := bearer(apiToken)
	h.Set("X-Forwarded-Method", "POST")
	h.Set("X-Forwarded-Uri", "/auth/login")
	h.Set("X-Forwarded-For", "198.51.100.120")
	h.Set("X-Account", padded)
	code, body := do(t, "GET", tg.api+"/v1/forward-auth", "", h)
	if code != http.StatusTooManyRequests || !strings.Contains(body, "ACCOUNT_LOCKED") {
		t.Fatalf("forward auth of a login on locked account frank padded to %d bytes: %d %s; want 429 ACCOUNT_LOCKED", len(padded), code, body)
	}
}
