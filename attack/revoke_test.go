package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/signals"
)

// Attacks on a trusted device that is no longer its owner's (7.1): a
// trusted device is exempt from the account's exempt_attested lockouts
// and spends a login budget of its own, so the security team must be able
// to take that trust away, and freeing a device id must not hand it on.

// lockOut reports ten failed logins for account (the attack the lockout
// rule answers) and waits until a check of it from a fresh address is
// answered ACCOUNT_LOCKED.
func (tg *target) lockOut(t *testing.T, account string) {
	t.Helper()
	for i := 0; i < 10; i++ {
		if status, b := do(t, "POST", tg.api+"/v1/report", `{"type":"login_failed","account":"`+account+`","ip":"203.0.113.9"}`, bearer(apiToken)); status != 202 {
			t.Fatalf("report %d: %d %s", i, status, b)
		}
	}
	eventually(t, 10*time.Second, func() string {
		if !tg.locked(t, account) {
			return account + " not locked out yet"
		}
		return ""
	})
}

// locked reports whether a check of account's login is ACCOUNT_LOCKED.
func (tg *target) locked(t *testing.T, account string) bool {
	_, b := do(t, "POST", tg.api+"/v1/check", `{"endpoint":"POST /auth/login","ip":"192.0.2.77","account":"`+account+`"}`, bearer(apiToken))
	return code(b) == "ACCOUNT_LOCKED"
}

// Attack: alice lost her phone, key and last device token with it, so an
// operator frees its device id (DELETE /v1/admin/attestations/{id}) for
// her new install. The attacker, who knows the id (the app sends it in the
// clear), attests it first with a genuine device of his own and is handed
// a device token for it. The id was still in alice's trusted devices: his
// guesses at her password pass her exempt_attested lockout.
// Defence: freeing an id takes it out of every account's trusted devices,
// in the store and in riskd's record.
func TestAttackFreedDeviceIDInheritsTrust(t *testing.T) {
	t.Parallel()
	tg := start(t, withPolicy(t, func(string) string { return trustPolicy }), strictUpstream(t))
	tg.enrol(t, "alice", "alice-phone")
	tg.lockOut(t, "alice")
	if status, b := do(t, "DELETE", tg.api+"/v1/admin/attestations/alice-phone", "", bearer(adminToken)); status != 200 {
		t.Fatalf("freeing the id: %d %s", status, b)
	}
	// the limiter hands any genuine device that attests the free id a
	// token for it: the attacker's is as good as the phone's was
	attacker := []string{"X-Device-Id", "alice-phone", "X-Device-Token", deviceToken(t, "alice-phone")}
	if status, c := tg.login(t, "203.0.113.50", "alice", "guess-1", attacker...); status != 429 || c != "ACCOUNT_LOCKED" {
		t.Fatalf("the attacker's guess under the freed id during alice's lockout: %d %s, want 429 ACCOUNT_LOCKED", status, c)
	}
	tg.syncRisk(t)
	if n, _ := tg.rdb.ZCard(context.Background(), bucket.TrustKey(tg.prefix, "account", "alice")).Result(); n != 0 {
		t.Fatalf("alice's trust set holds %d devices after the id was freed, want 0", n)
	}
}

// Attack: alice's trusted phone is stolen (unlocked, its app signed in).
// The thief guesses at her password from it while her account is locked
// out: the phone is exempt from the lockout and has a budget of its own,
// and there was no way to take its trust away (riskd wrote it back after
// a Redis loss, for the rest of trusted_for).
// Defence: DELETE /v1/admin/trusted-devices/{account}/{device_id} takes
// the device out of the account's trusted devices, in the store and in
// riskd's record, audited; the subject view lists the account's trusted
// devices.
func TestAttackStolenPhoneStaysTrusted(t *testing.T) {
	t.Parallel()
	tg, rs := trustTarget(t)
	tg.enrol(t, "alice", "alice-phone")
	tg.enrol(t, "alice", "alice-tablet")
	if devices := tg.trustedDevices(t, "alice"); devices != "alice-tablet,alice-phone" {
		t.Fatalf("alice's trusted devices: %q, want alice-tablet,alice-phone (the latest ending first)", devices)
	}
	tg.lockOut(t, "alice")
	status, b := do(t, "DELETE", tg.api+"/v1/admin/trusted-devices/alice/alice-phone", "", bearer(adminToken))
	if status != 200 || !strings.Contains(b, `"cleared":true`) {
		t.Fatalf("revoking the stolen phone: %d %s, want 200 cleared", status, b)
	}
	thief := []string{"X-Device-Id", "alice-phone", "X-Device-Token", deviceToken(t, "alice-phone")}
	if status, c := tg.login(t, "198.51.100.10", "alice", "guess-1", thief...); status != 429 || c != "ACCOUNT_LOCKED" {
		t.Fatalf("the thief's guess from the revoked phone: %d %s, want 429 ACCOUNT_LOCKED", status, c)
	}
	tablet := []string{"X-Device-Id", "alice-tablet", "X-Device-Token", deviceToken(t, "alice-tablet")}
	if status, c := tg.login(t, "198.51.100.11", "alice", "right", tablet...); status != 200 {
		t.Fatalf("alice's tablet, still trusted: %d %s, want 200", status, c)
	}
	if devices := tg.trustedDevices(t, "alice"); devices != "alice-tablet" {
		t.Fatalf("alice's trusted devices after the revocation: %q, want alice-tablet", devices)
	}
	// Redis restarts empty: riskd writes back the lockout and the trust
	// it records, which must no longer hold the phone
	tg.syncRisk(t)
	rs.Restart(t)
	lockKey := bucket.LockKey(tg.prefix, "account", "alice")
	eventually(t, 15*time.Second, func() string {
		if n, _ := tg.rdb.Exists(context.Background(), lockKey).Result(); n != 1 || !tg.locked(t, "alice") {
			return "the lockout is not re-asserted yet"
		}
		if status, c := tg.login(t, "198.51.100.11", "alice", "right", tablet...); status != 200 {
			return fmt.Sprintf("the tablet after Redis restarted empty: %d %s", status, c)
		}
		return ""
	})
	if status, c := tg.login(t, "198.51.100.10", "alice", "guess-2", thief...); status != 429 || c != "ACCOUNT_LOCKED" {
		t.Fatalf("the thief's guess after riskd wrote trust back: %d %s, want 429 ACCOUNT_LOCKED", status, c)
	}
}

// trustedDevices returns the ids of the account's trusted devices as its
// subject view lists them, joined by commas.
func (tg *target) trustedDevices(t *testing.T, account string) string {
	t.Helper()
	status, b := do(t, "GET", tg.api+"/v1/admin/subjects/account/"+account, "", bearer(adminToken))
	var v struct {
		TrustedDevices []struct {
			DeviceID  string    `json:"device_id"`
			ExpiresAt time.Time `json:"expires_at"`
		} `json:"trusted_devices"`
	}
	if err := json.Unmarshal([]byte(b), &v); status != 200 || err != nil {
		t.Fatalf("subject view of %s: %d %s (%v)", account, status, b, err)
	}
	ids := make([]string, 0, len(v.TrustedDevices))
	for _, d := range v.TrustedDevices {
		if d.ExpiresAt.Before(time.Now()) {
			t.Errorf("trusted device %s ends at %s, in the past", d.DeviceID, d.ExpiresAt)
		}
		ids = append(ids, d.DeviceID)
	}
	return strings.Join(ids, ",")
}

// Attack: the attacker phished alice's password. He attests a device of
// his own under the id "alice-phone\u00a0" (her phone's id and a no-break
// space, which the console's list shows as a device of its own) and logs
// in with it: it is a trusted device of alice, exempt from her lockouts,
// with a budget of its own. Alice calls the security team; the operator
// opens her page in the console and presses Revoke beside the attacker's
// device. The console trimmed the id it posted: it revoked "alice-phone",
// alice's own phone, and the attacker's device stayed trusted.
// Defence: the console posts the id exactly as the list shows it.
func TestAttackConsoleRevokeTrimmedDeviceID(t *testing.T) {
	t.Parallel()
	tg := start(t, withPolicy(t, func(string) string { return trustPolicy }), strictUpstream(t))
	const attackers = "alice-phone\u00a0"
	tg.enrol(t, "alice", "alice-phone")
	tg.enrol(t, "alice", attackers)
	if devices := tg.trustedDevices(t, "alice"); devices != attackers+",alice-phone" {
		t.Fatalf("alice's trusted devices: %q, want the attacker's and hers", devices)
	}
	c := consoleClient(t)
	tg.consoleSignIn(t, c)
	code, _, page := consoleDo(t, c, "GET", tg.api+"/console/subjects?"+url.Values{"subject": {"account"}, "id": {"alice"}}.Encode(), nil)
	if code != 200 {
		t.Fatalf("alice's page: %d %s", code, pageError(page))
	}
	var form url.Values
	for _, f := range formRE.FindAllStringSubmatch(page, -1) {
		if f[1] == "/console/trusted-devices/revoke" && strings.Contains(f[2], `data-revoke="alice-phone`+"\u00a0"+`"`) {
			form = postedForm(t, f[0], f[1])
		}
	}
	if form == nil {
		t.Fatalf("no Revoke button for the attacker's device on alice's page:\n%s", page)
	}
	if code, loc, out := consoleDo(t, c, "POST", tg.api+"/console/trusted-devices/revoke", form); code != http.StatusSeeOther {
		t.Fatalf("revoke: %d %s %s", code, loc, out)
	}
	if devices := tg.trustedDevices(t, "alice"); devices != "alice-phone" {
		t.Fatalf("alice's trusted devices after the operator revoked the attacker's: %q, want alice-phone alone", devices)
	}
	tg.lockOut(t, "alice")
	attacker := []string{"X-Device-Id", attackers, "X-Device-Token", deviceToken(t, attackers)}
	if status, c := tg.login(t, "203.0.113.50", "alice", "right", attacker...); status != 429 || c != "ACCOUNT_LOCKED" {
		t.Fatalf("the attacker's login from his revoked device during alice's lockout: %d %s, want 429 ACCOUNT_LOCKED", status, c)
	}
}

// Attack: alice's trusted phone is stolen, its app signed in (or her
// password saved in it). The security team revokes the phone's trust. The
// thief waits out the minute a revocation allows for limiter clocks apart
// (a login stamped within it is not trusted), then signs in from the phone
// with the device token it holds: riskd trusted the phone again, and its
// logins passed alice's next lockout (200 through ACCOUNT_LOCKED) for
// trusted_for more.
// Defence: a report carries its device token's expiry (token_expires);
// riskd enrols no device whose token was issued at or before a recorded
// revocation of it. The phone is trusted again only with a token issued
// after the revocation. (No clock is injected into a running limiter, so
// the test waits out the skew: a minute.)
func TestAttackStolenPhoneTokenTrustsItAgain(t *testing.T) {
	t.Parallel()
	tg := start(t, withPolicy(t, func(string) string { return trustPolicy }), strictUpstream(t))
	thief := []string{"X-Device-Id", "alice-phone", "X-Device-Token", deviceToken(t, "alice-phone")}
	if status, c := tg.login(t, "198.51.100.10", "alice", "right", thief...); status != 200 {
		t.Fatalf("alice's login from her phone: %d %s, want 200", status, c)
	}
	eventually(t, 10*time.Second, func() string {
		if devices := tg.trustedDevices(t, "alice"); devices != "alice-phone" {
			return fmt.Sprintf("alice's trusted devices: %q, want alice-phone", devices)
		}
		return ""
	})
	if status, b := do(t, "DELETE", tg.api+"/v1/admin/trusted-devices/alice/alice-phone", "", bearer(adminToken)); status != 200 {
		t.Fatalf("revoking the stolen phone: %d %s", status, b)
	}
	time.Sleep(signals.MaxClockSkew + time.Second)
	if status, c := tg.login(t, "198.51.100.10", "alice", "right", thief...); status != 200 {
		t.Fatalf("the thief's sign-in from the phone: %d %s, want 200", status, c)
	}
	tg.syncRisk(t)
	if devices := tg.trustedDevices(t, "alice"); devices != "" {
		t.Errorf("alice's trusted devices after the thief's sign-in: %q, want none", devices)
	}
	tg.lockOut(t, "alice")
	if status, c := tg.login(t, "198.51.100.10", "alice", "right", thief...); status != 429 || c != "ACCOUNT_LOCKED" {
		t.Fatalf("the thief's sign-in during alice's lockout: %d %s, want 429 ACCOUNT_LOCKED", status, c)
	}
}
