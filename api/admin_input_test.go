package api

import (
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
