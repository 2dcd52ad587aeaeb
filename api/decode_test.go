package api

import (
	"strings"
	"testing"
	"unsafe"

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

// TestCheckStringsDoNotPinALongToken: the check body's string fields share
// one allocation, but one longer than any valid value (a device_token of
// 60 KiB, which the check ignores rather than refuses) gets its own, so the
// identifiers a decision's event keeps while it waits to be published do
// not hold the token in memory.
func TestCheckStringsDoNotPinALongToken(t *testing.T) {
	long := strings.Repeat("t", 60<<10)
	for _, c := range []struct {
		token  string
		shared bool
	}{{"tok", true}, {long, false}} {
		body := `{"endpoint":"GET /","ip":"192.0.2.1","user_id":"u","device_token":"` + c.token + `"}`
		var req checkRequest
		if !scanCheck([]byte(body), &req) {
			t.Fatalf("%.60s: not on the fast path", body)
		}
		if *req.Endpoint != "GET /" || *req.IP != "192.0.2.1" || *req.UserID != "u" || *req.DeviceToken != c.token {
			t.Fatalf("%.60s: read %q %q %q %.10q", body, *req.Endpoint, *req.IP, *req.UserID, *req.DeviceToken)
		}
		// shared values lie one after another in one allocation
		base := unsafe.StringData(*req.Endpoint)
		next := func(s string, off int) bool {
			return unsafe.StringData(s) == (*byte)(unsafe.Add(unsafe.Pointer(base), off))
		}
		if !next(*req.IP, 5) || !next(*req.UserID, 5+9) {
			t.Fatalf("%.60s: endpoint, ip and user_id are not one allocation", body)
		}
		if got := next(*req.DeviceToken, 5+9+1); got != c.shared {
			t.Errorf("a device_token of %d bytes shares the identifiers' allocation: %v, want %v", len(c.token), got, c.shared)
		}
	}
}
