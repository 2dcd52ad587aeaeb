package api

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/streams"
)

// TestAdminMultiplierTypeMessages: a multiplier that is not a number, or a
// number no float64 holds (1e999, as JSON spells an infinity), is a 400
// that says what is wrong with the field; it said `must be a string`.
func TestAdminMultiplierTypeMessages(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "s3cret")
	auth := []string{"Authorization", "Bearer s3cret"}
	for _, tt := range []struct{ name, body, msg string }{
		{"string", `{"multiplier":"0.5"}`, `field \"multiplier\" must be a number`},
		{"bool", `{"multiplier":true}`, `field \"multiplier\" must be a number`},
		{"object", `{"multiplier":{}}`, `field \"multiplier\" must be a number`},
		{"huge", `{"multiplier":1e999}`, `field \"multiplier\" is out of range: 1e999`},
		{"huge negative", `{"multiplier":-1e999}`, `field \"multiplier\" is out of range: -1e999`},
		{"ttl a number", `{"multiplier":1,"ttl":600}`, `field \"ttl\" must be a string`},
		{"reason a number", `{"multiplier":1,"reason":7}`, `field \"reason\" must be a string`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			expect(t, f.do(t, "PUT", "/v1/admin/multipliers/device/x", tt.body, auth...), 400,
				`{"error":{"code":"BAD_REQUEST","message":"`+tt.msg+`","details":{},"request_id":"req-1"}}`)
		})
	}
}

// TestAdminMultiplierClearRecordsCleared (6.5, docs/events.md): the
// multiplier_clear audit event says whether an admin multiplier was in
// force, as a lift's and a forget's do; it carried no "cleared" at all.
func TestAdminMultiplierClearRecordsCleared(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "tok")
	audit := &auditLog{}
	f.srv.o.Audit = audit
	auth := []string{"Authorization", "Bearer tok"}
	expect(t, f.do(t, "PUT", "/v1/admin/multipliers/user/u1", `{"multiplier":2,"ttl":"1m"}`, auth...), 200, "")
	expect(t, f.do(t, "DELETE", "/v1/admin/multipliers/user/u1", "", auth...), 200, "")
	expect(t, f.do(t, "DELETE", "/v1/admin/multipliers/user/u1", "", auth...), 200, "")
	expect(t, f.do(t, "PUT", "/v1/admin/multipliers/user/u2", `{"multiplier":2,"ttl":"1m"}`, auth...), 200, "")
	f.now = f.now.Add(2 * time.Minute) // expired: nothing in force to clear
	expect(t, f.do(t, "DELETE", "/v1/admin/multipliers/user/u2", "", auth...), 200, "")
	var got []string
	for _, a := range audit.list {
		if a.Action != streams.AuditMultiplierClear {
			continue
		}
		c := "absent"
		if a.Cleared != nil {
			c = strconv.FormatBool(*a.Cleared)
		}
		got = append(got, a.ID+" "+c)
	}
	if want := []string{"u1 true", "u1 false", "u2 false"}; !slices.Equal(got, want) {
		t.Fatalf("multiplier_clear events' cleared = %q, want %q", got, want)
	}
}

// TestAdminMultiplierNegativeZero: -0 is the multiplier 0 (it blocks the
// subject); it was stored, shown and audited as -0.
func TestAdminMultiplierNegativeZero(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "tok")
	audit := &auditLog{}
	f.srv.o.Audit = audit
	auth := []string{"Authorization", "Bearer tok"}
	for _, body := range []string{`{"multiplier":-0}`, `{"multiplier":-0.0}`, `{"multiplier":-0e5}`} {
		expect(t, f.do(t, "PUT", "/v1/admin/multipliers/user/u1", body, auth...), 200,
			`{"subject":"user","id":"u1","effective":0,"multipliers":[{"source":"admin","value":0,"expires_at":null,"reason":""}],"lockout":null,"attestation":null,"request_id":"req-1"}`)
	}
	for _, a := range audit.list {
		if b, _ := json.Marshal(a); !strings.Contains(string(b), `"value":0,`) {
			t.Errorf("audit event %s: want value 0", b)
		}
	}
}
