package api

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/streams"
)

// TestAdminTrustedDevices (7.1): an account's subject view lists its
// trusted devices, the latest ending first; DELETE
// /v1/admin/trusted-devices/{account}/{device_id} revokes one, without the
// device /all of them, each audited as trust_revoke; bad ids are 400, a
// revocation whose event cannot be published is 503 with it in force.
func TestAdminTrustedDevices(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "tok")
	audit := &auditLog{}
	f.srv.o.Audit = audit
	auth := []string{"Authorization", "Bearer tok"}
	ctx := context.Background()
	alice := bucket.Subject{Kind: "account", ID: "alice"}
	for d, h := range map[string]time.Duration{"phone": 2 * time.Hour, "tablet": 3 * time.Hour, "watch": time.Hour} {
		if err := f.store.Trust(ctx, alice, d, t0.Add(h)); err != nil {
			t.Fatal(err)
		}
	}
	expect(t, f.do(t, "GET", "/v1/admin/subjects/account/Alice", "", auth...), 200,
		`{"subject":"account","id":"alice","effective":1,"multipliers":[],"lockout":null,"attestation":null,`+
			`"trusted_devices":[{"device_id":"tablet","expires_at":"2024-04-19T13:30:00Z"},{"device_id":"phone","expires_at":"2024-04-19T12:30:00Z"},`+
			`{"device_id":"watch","expires_at":"2024-04-19T11:30:00Z"}],"request_id":"req-1"}`)
	expect(t, f.do(t, "DELETE", "/v1/admin/trusted-devices/alice/phone", "", auth...), 200,
		`{"account":"alice","cleared":true,"device_id":"phone","request_id":"req-1"}`)
	expect(t, f.do(t, "DELETE", "/v1/admin/trusted-devices/alice/phone", "", auth...), 200,
		`{"account":"alice","cleared":false,"device_id":"phone","request_id":"req-1"}`)
	expect(t, f.do(t, "GET", "/v1/admin/subjects/account/alice", "", auth...), 200,
		`{"subject":"account","id":"alice","effective":1,"multipliers":[],"lockout":null,"attestation":null,`+
			`"trusted_devices":[{"device_id":"tablet","expires_at":"2024-04-19T13:30:00Z"},{"device_id":"watch","expires_at":"2024-04-19T11:30:00Z"}],"request_id":"req-1"}`)
	expect(t, f.do(t, "DELETE", "/v1/admin/trusted-devices/alice", "", auth...), 200,
		`{"account":"alice","cleared":true,"request_id":"req-1"}`)
	expect(t, f.do(t, "GET", "/v1/admin/subjects/account/alice", "", auth...), 200,
		`{"subject":"account","id":"alice","effective":1,"multipliers":[],"lockout":null,"attestation":null,"trusted_devices":[],"request_id":"req-1"}`)
	if len(audit.list) != 3 {
		t.Fatalf("%d audit events, want 3", len(audit.list))
	}
	for i, want := range []struct {
		device  string
		cleared bool
	}{{"phone", true}, {"phone", false}, {"", true}} {
		a := audit.list[i]
		if a.Action != streams.AuditTrustRevoke || a.Subject != "account" || a.ID != "alice" || a.DeviceID != want.device || a.Cleared == nil || *a.Cleared != want.cleared {
			t.Errorf("audit event %d: %+v, want trust_revoke of alice's %q cleared %v", i, a, want.device, want.cleared)
		}
	}
	// other subjects' views carry no trusted_devices
	expect(t, f.do(t, "GET", "/v1/admin/subjects/user/alice", "", auth...), 200,
		`{"subject":"user","id":"alice","effective":1,"multipliers":[],"lockout":null,"attestation":null,"request_id":"req-1"}`)
	expect(t, f.do(t, "DELETE", "/v1/admin/trusted-devices/alice/bad%01id", "", auth...), 400, "")
	expect(t, f.do(t, "DELETE", "/v1/admin/trusted-devices/alice/phone", ""), 401, "")
	if err := f.store.Trust(ctx, alice, "phone", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	audit.fail = true
	w := f.do(t, "DELETE", "/v1/admin/trusted-devices/alice/phone", "", auth...)
	expect(t, w, 503, "")
	if ds, _ := f.store.TrustedDevices(ctx, alice); len(ds) != 0 {
		t.Fatalf("after the 503 alice still trusts %v: the revocation must be in force", ds)
	}
}
