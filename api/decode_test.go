package api

import (
	"testing"

	"github.com/tollgate-dev/tollgate/engine"
)

// TestDecodeCheckIPText: the check's ip is keyed by its canonical text
// whatever form the client sent, on the fast path and on encoding/json's
// (an escape in the body takes the second).
func TestDecodeCheckIPText(t *testing.T) {
	for _, c := range []struct{ sent, want string }{
		{"192.0.2.1", "192.0.2.1"},
		{"2001:db8::1", "2001:db8::1"},
		{"2001:DB8::1", "2001:db8::1"},
		{"2001:0db8:0:0::1", "2001:db8::1"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
		{"::1", "::1"},
	} {
		for _, body := range []string{
			`{"endpoint":"GET /","ip":"` + c.sent + `","user_id":"u"}`,
			`{"endpoint":"GET \u002f","ip":"` + c.sent + `","user_id":"u"}`,
		} {
			var in engine.Input
			if aerr := decodeCheck([]byte(body), &in); aerr != nil {
				t.Fatalf("%s: %s", body, aerr.message)
			}
			if in.IP != c.want || in.Addr.String() != c.want || in.Endpoint != "GET /" || in.UserID != "u" {
				t.Errorf("%s: ip %q (addr %v), endpoint %q, user %q; want ip %q", body, in.IP, in.Addr, in.Endpoint, in.UserID, c.want)
			}
		}
	}
}
