package api

import (
	"testing"
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
