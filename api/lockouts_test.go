package api

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/streams"
)

// TestAdminLockoutsOfEverySubject (7.1): the lock of each subject kind is
// listed, shown in its subject view and lifted by DELETE
// /v1/admin/lockouts/{subject}/{id}, with a lockout_lift audit event
// naming the subject; other kinds are refused.
func TestAdminLockoutsOfEverySubject(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "tok")
	audit := &auditLog{}
	f.srv.o.Audit = audit
	auth := []string{"Authorization", "Bearer tok"}
	ctx := context.Background()
	for i, s := range []bucket.Subject{{Kind: "ip", ID: "192.0.2.7"}, {Kind: "user", ID: "u1"}, {Kind: "device", ID: "d1"}} {
		f.now = f.now.Add(time.Second)
		if err := f.store.SetLock(ctx, s, bucket.Lock{Kind: []string{"lockout", "step_up", "lockout"}[i], Rule: "r-" + s.Kind, Until: t0.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	expect(t, f.do(t, "GET", "/v1/admin/subjects/ip/192.0.2.7", "", auth...), 200,
		`{"subject":"ip","id":"192.0.2.7","effective":1,"multipliers":[],"lockout":{"kind":"lockout","rule":"r-ip","expires_at":"2024-04-19T11:30:00Z"},"lockouts":[{"kind":"lockout","rule":"r-ip","expires_at":"2024-04-19T11:30:00Z"}],"attestation":null,"request_id":"req-1"}`)
	expect(t, f.do(t, "GET", "/v1/admin/subjects/user/u1", "", auth...), 200,
		`{"subject":"user","id":"u1","effective":1,"multipliers":[],"lockout":{"kind":"step_up","rule":"r-user","expires_at":"2024-04-19T11:30:00Z"},"lockouts":[{"kind":"step_up","rule":"r-user","expires_at":"2024-04-19T11:30:00Z"}],"attestation":null,"request_id":"req-1"}`)
	w := f.do(t, "GET", "/v1/admin/lockouts", "", auth...)
	for _, want := range []string{`"subject":"ip","id":"192.0.2.7","kind":"lockout","rule":"r-ip"`,
		`"subject":"user","id":"u1","kind":"step_up","rule":"r-user"`, `"subject":"device","id":"d1","kind":"lockout","rule":"r-device"`} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("GET /v1/admin/lockouts = %s; lacks %s", w.Body, want)
		}
	}
	expect(t, f.do(t, "DELETE", "/v1/admin/lockouts/ip/192.0.2.7", "", auth...), 200, `{"cleared":true,"id":"192.0.2.7","request_id":"req-1","subject":"ip"}`)
	expect(t, f.do(t, "DELETE", "/v1/admin/lockouts/ip/192.0.2.7", "", auth...), 200, `{"cleared":false,"id":"192.0.2.7","request_id":"req-1","subject":"ip"}`)
	expect(t, f.do(t, "DELETE", "/v1/admin/lockouts/device/d1", "", auth...), 200, `{"cleared":true,"id":"d1","request_id":"req-1","subject":"device"}`)
	expect(t, f.do(t, "GET", "/v1/admin/subjects/ip/192.0.2.7", "", auth...), 200,
		`{"subject":"ip","id":"192.0.2.7","effective":1,"multipliers":[],"lockout":null,"attestation":null,"request_id":"req-1"}`)
	if len(audit.list) != 3 {
		t.Fatalf("audit events %+v", audit.list)
	}
	if a := audit.list[0]; a.Action != streams.AuditLockoutLift || a.Subject != "ip" || a.ID != "192.0.2.7" || a.Cleared == nil || !*a.Cleared {
		t.Errorf("lift: %+v", a)
	}
	for _, tt := range []struct{ path, msg string }{
		{"/v1/admin/lockouts/asn/64500", `subject \"asn\" is not one of account, ip, user, device, claim`},
		{"/v1/admin/lockouts/ip/nope", `id \"nope\" is not an IP address`},
	} {
		expect(t, f.do(t, "DELETE", tt.path, "", auth...), 400,
			`{"error":{"code":"BAD_REQUEST","message":"`+tt.msg+`","details":{},"request_id":"req-1"}}`)
	}
}

// TestReportAnyEventType (7.4): /v1/report takes any type matching

// TestAdminClaimAndIPv6Lockouts (7.1): the lock of a claim (a device id
// sent without its token) is shown in the device's view and in its own,
// lifted by the claim's DELETE and by the device's (the limiter answers
// it with scope "device"); an IPv6 client's lock, kept under its /64
// (rules by ip lock the prefix), is shown in the view of every address of
// it and of the prefix, and lifted by any of them, the audit naming the
// prefix; a whole address's lock of the previous release is shown in that
// address's view only, and lifted by it with the prefix's.
func TestAdminClaimAndIPv6Lockouts(t *testing.T) {
	t.Parallel()
	auth := []string{"Authorization", "Bearer tok"}
	ctx := context.Background()
	lock := bucket.Lock{Kind: "lockout", Rule: "r", Until: t0.Add(time.Hour)}
	const view = `"lockout":{"kind":"lockout","rule":"r","expires_at":"2024-04-19T11:30:00Z"}`
	f := newFixture(t, nil, "tok")
	audit := &auditLog{}
	f.srv.o.Audit = audit
	for _, id := range []string{"d1", "d2"} {
		if err := f.store.SetLock(ctx, bucket.Subject{Kind: bucket.ClaimKind, ID: id}, lock); err != nil {
			t.Fatal(err)
		}
	}
	for _, path := range []string{"/v1/admin/subjects/claim/d1", "/v1/admin/subjects/device/d1"} {
		if w := f.do(t, "GET", path, "", auth...); w.Code != 200 || !strings.Contains(w.Body.String(), view) {
			t.Errorf("GET %s = %d %s; want the claim's lock", path, w.Code, w.Body)
		}
	}
	expect(t, f.do(t, "DELETE", "/v1/admin/lockouts/claim/d1", "", auth...), 200, `{"cleared":true,"id":"d1","request_id":"req-1","subject":"claim"}`)
	expect(t, f.do(t, "DELETE", "/v1/admin/lockouts/device/d2", "", auth...), 200, `{"cleared":true,"id":"d2","request_id":"req-1","subject":"device"}`)
	for _, id := range []string{"d1", "d2"} {
		if _, ok, _ := f.store.GetLock(ctx, bucket.Subject{Kind: bucket.ClaimKind, ID: id}); ok {
			t.Errorf("the claim lock of %s is still in force", id)
		}
	}
	if len(audit.list) != 2 || audit.list[0].Subject != "claim" || audit.list[1].Subject != "device" {
		t.Errorf("audit events %+v", audit.list)
	}

	if err := f.store.SetLock(ctx, bucket.Subject{Kind: "ip", ID: "2001:db8::/64"}, lock); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/admin/subjects/ip/2001:db8::1", "/v1/admin/subjects/ip/2001:db8::ffff:2", "/v1/admin/subjects/ip/2001:db8::%2F64"} {
		w := f.do(t, "GET", path, "", auth...)
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"id":"2001:db8::/64"`) || !strings.Contains(w.Body.String(), view) {
			t.Errorf("GET %s = %d %s; want the prefix id and its lock", path, w.Code, w.Body)
		}
	}
	expect(t, f.do(t, "DELETE", "/v1/admin/lockouts/ip/2001:db8::ffff:2", "", auth...), 200, `{"cleared":true,"id":"2001:db8::/64","request_id":"req-1","subject":"ip"}`)
	if _, ok, _ := f.store.GetLock(ctx, bucket.Subject{Kind: "ip", ID: "2001:db8::/64"}); ok {
		t.Error("the prefix's lock is still in force")
	}
	if n := len(audit.list); n != 3 || audit.list[2].Subject != "ip" || audit.list[2].ID != "2001:db8::/64" {
		t.Errorf("audit events %+v; want the lift of the prefix", audit.list)
	}

	// a lock of the previous release, on the whole address
	old := bucket.Lock{Kind: "lockout", Rule: "r", Until: t0.Add(30 * time.Minute)}
	if err := f.store.SetLock(ctx, bucket.Subject{Kind: "ip", ID: "2001:db8::1"}, old); err != nil {
		t.Fatal(err)
	}
	if err := f.store.SetLock(ctx, bucket.Subject{Kind: "ip", ID: "2001:db8::/64"}, lock); err != nil {
		t.Fatal(err)
	}
	w := f.do(t, "GET", "/v1/admin/subjects/ip/2001:db8::1", "", auth...)
	if w.Code != 200 || !strings.Contains(w.Body.String(), view+`,"lockouts":[{"kind":"lockout","rule":"r","expires_at":"2024-04-19T11:30:00Z"},{"kind":"lockout","rule":"r","expires_at":"2024-04-19T11:00:00Z"}]`) {
		t.Errorf("the address's view = %d %s; want the prefix's lock, then the address's", w.Code, w.Body)
	}
	if w := f.do(t, "GET", "/v1/admin/subjects/ip/2001:db8::2", "", auth...); strings.Contains(w.Body.String(), "11:00:00Z") {
		t.Errorf("another address of the prefix shows the address's lock: %s", w.Body)
	}
	expect(t, f.do(t, "DELETE", "/v1/admin/lockouts/ip/2001:db8::1", "", auth...), 200, `{"cleared":true,"id":"2001:db8::/64","request_id":"req-1","subject":"ip"}`)
	for _, id := range []string{"2001:db8::/64", "2001:db8::1"} {
		if _, ok, _ := f.store.GetLock(ctx, bucket.Subject{Kind: "ip", ID: id}); ok {
			t.Errorf("the lock of %s is still in force", id)
		}
	}
	expect(t, f.do(t, "DELETE", "/v1/admin/lockouts/ip/2001:db8::%2F48", "", auth...), 400,
		`{"error":{"code":"BAD_REQUEST","message":"id \"2001:db8::/48\" is not an IP address, nor an IPv6 prefix of identity.ipv6_prefix's length (/64)","details":{},"request_id":"req-1"}}`)
}

// [a-z][a-z0-9_]{0,63}; others are refused naming the field.
func TestReportAnyEventType(t *testing.T) {
	t.Parallel()
	f := newAttrFixture(t, false)
	good := []string{"otp_sent", "signup", "payment_declined", "a", strings.Repeat("e", 64)}
	for _, typ := range good {
		expect(t, f.do(t, "POST", "/v1/report", `{"type":"`+typ+`","device_id":"d1","attributes":{"phone_prefix":"4479"}}`), 202, "")
	}
	for typ, shown := range map[string]string{"OTP": "OTP", "1otp": "1otp", "otp-sent": "otp-sent", strings.Repeat("e", 65): strings.Repeat("e", 64) + "..."} {
		expect(t, f.do(t, "POST", "/v1/report", `{"type":"`+typ+`","device_id":"d1"}`), 400,
			`{"error":{"code":"BAD_REQUEST","message":"field \"type\" must match [a-z][a-z0-9_]{0,63} (login_failed, otp_sent, ...), not \"`+shown+`\"","details":{},"request_id":"req-1"}}`)
	}
	f.reporter.mu.Lock()
	defer f.reporter.mu.Unlock()
	if len(f.reporter.list) != len(good) || f.reporter.list[0].Type != "otp_sent" || f.reporter.list[0].Attributes["phone_prefix"] != "4479" {
		t.Fatalf("published %+v", f.reporter.list)
	}
}

// TestAdminAttributeSubjects (7.4): multipliers on attr:NAME subjects are
// set, shown, listed and audited as "subject": "attr:NAME", "id": VALUE;
// the view warns that no limit of this policy is keyed by attr:phone_prefix.
func TestAdminAttributeSubjects(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "tok")
	audit := &auditLog{}
	f.srv.o.Audit = audit
	auth := []string{"Authorization", "Bearer tok"}
	expect(t, f.do(t, "PUT", "/v1/admin/multipliers/attr:phone_prefix/4479", `{"multiplier":0,"reason":"pumping"}`, auth...), 200,
		`{"subject":"attr:phone_prefix","id":"4479","effective":0,"multipliers":[{"source":"admin","value":0,"expires_at":null,"reason":"pumping"}],"lockout":null,"attestation":null,"warning":"no limit of the policy in force is keyed by attr:phone_prefix: multipliers on this subject change no decision (a multiplier weighs only on the limits whose by names its subject)","request_id":"req-1"}`)
	w := f.do(t, "GET", "/v1/admin/multipliers", "", auth...)
	if !strings.Contains(w.Body.String(), `"subject":"attr:phone_prefix","id":"4479","source":"admin","value":0`) {
		t.Errorf("list: %s", w.Body)
	}
	if len(audit.list) != 1 || audit.list[0].Subject != "attr:phone_prefix" || audit.list[0].ID != "4479" {
		t.Errorf("audit %+v", audit.list)
	}
	expect(t, f.do(t, "DELETE", "/v1/admin/multipliers/attr:phone_prefix/4479", "", auth...), 200,
		`{"subject":"attr:phone_prefix","id":"4479","effective":1,"multipliers":[],"lockout":null,"attestation":null,"warning":"no limit of the policy in force is keyed by attr:phone_prefix: multipliers on this subject change no decision (a multiplier weighs only on the limits whose by names its subject)","request_id":"req-1"}`)
	expect(t, f.do(t, "PUT", "/v1/admin/multipliers/attr:Phone/4479", `{"multiplier":0}`, auth...), 400, "")
}

// TestReportWithoutNATS: a limiter without NATS answers reports 503 with
// Retry-After, as every 503 of the API does.
func TestReportWithoutNATS(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "")
	f.srv.o.Reporter = nil
	expect(t, f.do(t, "POST", "/v1/report", `{"type":"login_failed","account":"a"}`), 503,
		`{"error":{"code":"LIMITER_UNAVAILABLE","message":"reports are not enabled (no NATS)","details":{"retry_after_ms":1000},"request_id":"req-1"}}`, "Retry-After", "1")
}

// TestReportIdempotencyKey: a report with an Idempotency-Key is published
// under an id of the key (its retries share it, so JetStream stores one),
// a report without one under a fresh ULID; a bad key is 400.
func TestReportIdempotencyKey(t *testing.T) {
	t.Parallel()
	f := newAttrFixture(t, false)
	body := `{"type":"login_failed","account":"a"}`
	for range 2 {
		expect(t, f.do(t, "POST", "/v1/report", body, "Idempotency-Key", "login-7"), 202, "")
	}
	expect(t, f.do(t, "POST", "/v1/report", body, "Idempotency-Key", "login-8"), 202, "")
	expect(t, f.do(t, "POST", "/v1/report", body), 202, "")
	for _, bad := range []string{"a b", strings.Repeat("k", MaxIdempotencyKey+1), "é"} {
		expect(t, f.do(t, "POST", "/v1/report", body, "Idempotency-Key", bad), 400, "")
	}
	f.reporter.mu.Lock()
	defer f.reporter.mu.Unlock()
	ids := make([]string, len(f.reporter.list))
	for i, r := range f.reporter.list {
		ids[i] = r.ID
	}
	if len(ids) != 4 || ids[0] != ids[1] || ids[0] == ids[2] || !strings.HasPrefix(ids[0], "k") || len(ids[0]) != 33 || len(ids[3]) != 26 {
		t.Fatalf("published ids %q", ids)
	}
}
