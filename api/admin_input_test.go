package api

import (
	"strings"
	"testing"
)

// TestAdminMultiplierUnderflow: a multiplier written as a nonzero number
// too small for a float64 (1e-999) read as 0, which blocks the subject:
// asked to tighten, the API blocked, and answered 200. It is a 400 now;
// 0 itself, in any spelling, still blocks.
func TestAdminMultiplierUnderflow(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "s3cret")
	auth := []string{"Authorization", "Bearer s3cret"}
	for _, lit := range []string{"1e-999", "0.1e-400", "-1e-999", "0.000e-999999", "10E-1000"} {
		want := `{"error":{"code":"BAD_REQUEST","message":"field \"multiplier\" is too small: ` + lit + ` is no float64 but 0, which blocks (send 0 to block)","details":{},"request_id":"req-1"}}`
		if lit == "0.000e-999999" {
			want = `{"subject":"device","id":"x","effective":0,"multipliers":[{"source":"admin","value":0,"expires_at":null,"reason":""}],"lockout":null,"attestation":null,"request_id":"req-1"}`
		}
		t.Run(lit, func(t *testing.T) {
			w := f.do(t, "PUT", "/v1/admin/multipliers/device/x", `{"multiplier":`+lit+`}`, auth...)
			if lit == "0.000e-999999" {
				expect(t, w, 200, want)
				return
			}
			expect(t, w, 400, want)
		})
	}
}

// TestAdminFieldGivenTwice: encoding/json matches field names without
// regard to case and keeps the last, so {"multiplier":0.5,"MULTIPLIER":0}
// blocked the subject while the request read, to a reviewer or a log
// that takes the first, as a halving. A field given twice, in any
// spelling, is a 400.
func TestAdminFieldGivenTwice(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "s3cret")
	auth := []string{"Authorization", "Bearer s3cret"}
	for name, body := range map[string]string{
		"same spelling":    `{"multiplier":0.5,"multiplier":0}`,
		"another spelling": `{"multiplier":0.5,"MULTIPLIER":0}`,
		"ttl":              `{"multiplier":0.5,"ttl":"1h","Ttl":"8760h"}`,
		"reason":           `{"multiplier":0.5,"reason":"a","REASON":"b"}`,
	} {
		t.Run(name, func(t *testing.T) {
			w := f.do(t, "PUT", "/v1/admin/multipliers/device/x", body, auth...)
			if w.Code != 400 || !strings.Contains(w.Body.String(), "is given more than once") {
				t.Fatalf("%s: %d %s", body, w.Code, w.Body)
			}
		})
	}
	expect(t, f.do(t, "GET", "/v1/admin/subjects/device/x", "", auth...), 200,
		`{"subject":"device","id":"x","effective":1,"multipliers":[],"lockout":null,"attestation":null,"request_id":"req-1"}`)
}

// TestAdminTTLTooShort: a ttl under a second ("1ns", "999ms": a slip for
// "1m") was taken, answered 200 and audited as a multiplier set, and
// ended before the answer was written (the stores keep microseconds):
// nothing was in force. It is a 400 now.
func TestAdminTTLTooShort(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "s3cret")
	auth := []string{"Authorization", "Bearer s3cret"}
	for _, ttl := range []string{"1ns", "999us", "999ms"} {
		t.Run(ttl, func(t *testing.T) {
			expect(t, f.do(t, "PUT", "/v1/admin/multipliers/device/x", `{"multiplier":0.5,"ttl":"`+ttl+`"}`, auth...), 400,
				`{"error":{"code":"BAD_REQUEST","message":"field \"ttl\" must be at least 1s: \"`+ttl+`\" would end before the answer","details":{},"request_id":"req-1"}}`)
		})
	}
	expect(t, f.do(t, "PUT", "/v1/admin/multipliers/device/x", `{"multiplier":0.5,"ttl":"1s"}`, auth...), 200,
		`{"subject":"device","id":"x","effective":0.5,"multipliers":[{"source":"admin","value":0.5,"expires_at":"2024-04-19T10:30:01Z","reason":""}],"lockout":null,"attestation":null,"request_id":"req-1"}`)
}

// TestAdminAuditClientIP: an audit event names the client as the proxy
// rules identify it (client_ip); from a peer that is no trusted proxy an
// X-Forwarded-For is not believed: the client is the peer.
func TestAdminAuditClientIP(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "tok")
	audit := &auditLog{}
	f.srv.o.Audit = audit
	expect(t, f.do(t, "PUT", "/v1/admin/multipliers/user/u1", `{"multiplier":2}`, "Authorization", "Bearer tok", "X-Forwarded-For", "198.51.100.9"), 200, "")
	if len(audit.list) != 1 || audit.list[0].ClientIP != "192.0.2.1" || audit.list[0].RemoteAddr != "192.0.2.1:1234" {
		t.Fatalf("audit events %+v: want client_ip 192.0.2.1, the untrusted peer", audit.list)
	}
}
