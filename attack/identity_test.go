package attack

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/service"
)

// withPolicy replaces the attacked policy by edit's version of it (riskd
// reads the same file).
func withPolicy(t *testing.T, edit func(string) string) setup {
	return func(c *service.Config) {
		if err := os.WriteFile(c.ConfigPath, []byte(edit(attackPolicy)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// insertAfter returns edit inserting text after the line that contains anchor.
func insertAfter(anchor, text string) func(string) string {
	return func(p string) string {
		i := strings.Index(p, anchor)
		j := i + strings.IndexByte(p[i:], '\n') + 1
		return p[:j] + text + p[j:]
	}
}

// lastUser returns the X-User-Id the upstream saw on the last request.
func (u *upstream) lastUser() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.users[len(u.users)-1]
}

// signAt is the timestamped user signature (7.1) an app server made at t.
func signAt(user string, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	m := hmac.New(sha256.New, []byte(userKey))
	m.Write([]byte(ts + "." + user))
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// Attack: a signed user header leaked once (a log, a proxy's debug dump)
// is replayed: the bare signature covers the user id only, so it is valid
// for ever, and the attacker is alice for as long as he likes.
// Defence (7.1): the timestamped form t=...,v1=... is valid for
// user_signature_max_age of the limiter's clock, and
// user_signature_require_timestamp refuses the bare form.
func TestAttackReplayedSignedUserHeader(t *testing.T) {
	t.Parallel()
	tg := start(t, withPolicy(t, insertAfter("user_signature_key_env:", "  user_signature_require_timestamp: true\n")))
	now := time.Now()
	for _, c := range []struct {
		name, sig string
		want      bool
	}{
		{"fresh timestamped", signAt("alice", now), true},
		{"captured an hour ago", signAt("alice", now.Add(-time.Hour)), false},
		{"captured 6 minutes ago", signAt("alice", now.Add(-6*time.Minute)), false},
		{"bare (never expires)", sign("alice"), false},
	} {
		if code, body := do(t, "GET", tg.public+"/feed", "", from("198.51.100.1", "X-User-Id", "alice", "X-User-Signature", c.sig)); code != http.StatusOK {
			t.Fatalf("%s: %d %s", c.name, code, body)
		}
		if got := tg.up.lastUser(); (len(got) == 1 && got[0] == "alice") != c.want {
			t.Errorf("%s: the upstream saw X-User-Id %q; authenticated should be %v", c.name, got, c.want)
		}
	}
}

// forwardAuth asks the limiter's forward-auth endpoint, as a gateway on
// loopback (a trusted proxy) does, about a request from ip.
func (tg *target) forwardAuth(t *testing.T, method, uri, ip string) int {
	t.Helper()
	h := bearer(apiToken)
	h.Set("X-Forwarded-Method", method)
	h.Set("X-Forwarded-Uri", uri)
	h.Set("X-Forwarded-For", ip)
	code, _ := do(t, "GET", tg.api+"/v1/forward-auth", "", h)
	return code
}

// Attack: the login route spelled as some framework still serves it as
// the login route (Tomcat's ";" parameters, IIS's backslash and case
// folding, Rails' format suffix, a fragment a gateway passes on, a
// lower-case method) is classed "write" in forward auth: login-ip
// (10/min per address) never counts it, so guessing is unlimited.
// Defence (7.1): route matching folds every one of these spellings.
func TestAttackLoginRouteSpellingsInForwardAuth(t *testing.T) {
	t.Parallel()
	tg := start(t)
	for i, c := range []struct{ method, uri string }{
		{"POST", "/AUTH/login"},
		{"POST", "/Auth/Login"},
		{"POST", "/auth/login;jsessionid=1"},
		{"POST", "/auth/login/..;/login"},
		{"POST", "/auth/login.json"},
		{"POST", `/auth\login`},
		{"POST", "/auth%5Clogin"},
		{"POST", "/auth/login#x"},
		{"post", "/auth/login"},
		{"Post", "/auth/login"},
	} {
		ip := fmt.Sprintf("198.51.100.%d", 10+i)
		allowed := 0
		for range 12 {
			if tg.forwardAuth(t, c.method, c.uri, ip) == http.StatusOK {
				allowed++
			}
		}
		if allowed != 10 {
			t.Errorf("%s %s: %d of 12 attempts from one address allowed; want 10 (login-ip, 10/min)", c.method, c.uri, allowed)
		}
	}
}

// withDenyList adds a deny list of addresses to the attacked policy.
func withDenyList(t *testing.T, addrs ...string) setup {
	return func(c *service.Config) {
		dir := filepath.Dir(c.ConfigPath)
		if err := os.WriteFile(filepath.Join(dir, "scanners.txt"), []byte(strings.Join(addrs, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		withPolicy(t, func(p string) string {
			return p + "lists:\n  scanners: {file: scanners.txt, kind: ip}\ndeny: [scanners]\n"
		})(c)
	}
}

// Attack: a load balancer that appends the client's port
// (X-Forwarded-For: 198.51.100.66:4711) makes every entry unreadable, so
// the limiter falls back to the balancer's own address: a denied scanner
// gets through, and all clients share the balancer's bucket (one client
// spends everybody's 60/min).
// Defence (7.1): entries with a port are read as their address.
func TestAttackForwardedForWithPort(t *testing.T) {
	t.Parallel()
	tg := start(t, withDenyList(t, "198.51.100.66", "2001:db8:bad::1"))
	for _, xff := range []string{"198.51.100.66:4711", "[2001:db8:bad::1]:443"} {
		if code, body := do(t, "GET", tg.public+"/feed", "", from(xff)); code != http.StatusForbidden {
			t.Errorf("denied scanner as %s: %d %.120s; want 403", xff, code, body)
		}
	}
	// one client on rotating ports spends its own 60/min (and refills at
	// 1/s while it goes on), then is refused
	allowed, limited := 0, false
	for i := 0; i < 200 && !limited; i++ {
		code, _ := do(t, "GET", tg.public+"/feed", "", from(fmt.Sprintf("203.0.113.5:%d", 1000+i)))
		limited = code == http.StatusTooManyRequests
		if code == http.StatusOK {
			allowed++
		}
	}
	if !limited || allowed < 60 {
		t.Errorf("one client on rotating ports: %d allowed before a 429 (limited %v); want 60 or a few more (ip-unauth, 60/min, one bucket)", allowed, limited)
	}
	if code, body := do(t, "GET", tg.public+"/feed", "", from("203.0.113.6:80")); code != http.StatusOK {
		t.Errorf("another client after the first spent its budget: %d %.120s; want 200 (a bucket of its own)", code, body)
	}
}

// Attack: an IPv6 subscriber gets a whole /64 (2^64 addresses) and moves
// to a fresh one per request: each address had its own ip-unauth bucket,
// so the 60/min never bound, and an admin block of the address he was
// seen at missed the next one.
// Defence (7.1): limits and multipliers keyed by ip key an IPv6 client by
// its /64 (identity.ipv6_prefix); admin ip ids address that prefix.
func TestAttackIPv6RotationWithinPrefix(t *testing.T) {
	t.Parallel()
	tg := start(t)
	allowed, limited := 0, false
	for i := 0; i < 200 && !limited; i++ {
		code, _ := do(t, "GET", tg.public+"/feed", "", from(fmt.Sprintf("2001:db8:1:2:%x::%x", i, i+1)))
		limited = code == http.StatusTooManyRequests
		if code == http.StatusOK {
			allowed++
		}
	}
	if !limited || allowed < 60 {
		t.Errorf("rotating addresses of one /64: %d allowed before a 429 (limited %v); want 60 or a few more (one bucket)", allowed, limited)
	}
	if code, body := do(t, "GET", tg.public+"/feed", "", from("2001:db8:1:3::1")); code != http.StatusOK {
		t.Errorf("a client of another /64: %d %.120s; want 200", code, body)
	}
	// the operator blocks the address he saw; the rest of its /64 is blocked with it
	if code, body := do(t, "PUT", tg.api+"/v1/admin/multipliers/ip/2001:db8:9:9::1", `{"multiplier":0,"ttl":"10m"}`, bearer(adminToken)); code != 200 {
		t.Fatalf("PUT multiplier: %d %s", code, body)
	}
	if code, _ := do(t, "GET", tg.public+"/feed", "", from("2001:db8:9:9:abcd::7")); code != http.StatusTooManyRequests {
		t.Errorf("another address of the blocked address's /64: %d; want 429", code)
	}
}

// Attack: behind a load balancer every caller of the API port has the
// balancer's address, and the failed-token throttle counted per peer:
// ten wrong tokens from one client locked every caller out of /v1/check
// and the admin API for a minute.
// Defence (7.1): the throttle counts per client as the proxy rules find
// it (the right-most untrusted X-Forwarded-For address).
func TestAttackWrongTokensThrottleOtherClients(t *testing.T) {
	t.Parallel()
	tg := start(t)
	call := func(path, body, ip, token string) int {
		h := bearer(token)
		h.Set("X-Forwarded-For", ip)
		code, _ := do(t, "POST", tg.api+path, body, h)
		return code
	}
	check := `{"endpoint":"GET /feed","ip":"192.0.2.10"}`
	for range 11 {
		call("/v1/check", check, "198.51.100.66", "guess")
		call("/v1/admin/offenders", "", "198.51.100.66", "guess")
	}
	if code := call("/v1/check", check, "203.0.113.7", apiToken); code != http.StatusOK {
		t.Errorf("another client's check with the right API token: %d; want 200", code)
	}
	h := bearer(adminToken)
	h.Set("X-Forwarded-For", "203.0.113.7")
	if code, body := do(t, "GET", tg.api+"/v1/admin/offenders", "", h); code != http.StatusOK {
		t.Errorf("another client's admin call with the right token: %d %.120s; want 200", code, body)
	}
	if code := call("/v1/check", check, "198.51.100.66", apiToken); code != http.StatusTooManyRequests {
		t.Errorf("the guessing client, now with the right token: %d; want 429 (still throttled)", code)
	}
}
