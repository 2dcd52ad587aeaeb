package api

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tollgate-dev/tollgate/engine"
)

// FuzzDecodeCheck: no body crashes the decoder, every rejection names a
// field or the body, and every accepted input is within bounds.
func FuzzDecodeCheck(f *testing.F) {
	for _, s := range []string{
		`{"endpoint":"POST /auth/login","ip":"198.51.100.7","user_id":"u_42","device_id":"d_1","account":"alice@example.com","cost":1}`,
		`{"endpoint":"GET /","ip":"::1"}`, `{"ip":"1.2.3.4"}`, `[]`, `{"cost":-1}`, `{"endpoint":"GET /","ip":"1.2.3.4","cost":1e5}`, ``, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var in engine.Input
		aerr := decodeCheck(body, &in)
		if aerr != nil {
			if aerr.status != 400 || !(strings.HasPrefix(aerr.message, "field ") || strings.HasPrefix(aerr.message, "body") || strings.HasPrefix(aerr.message, "unknown field")) {
				t.Fatalf("bad rejection %+v", aerr)
			}
			return
		}
		if in.Endpoint == "" || in.IP == "" || in.Cost < 0 || in.Cost > MaxCost || len(in.UserID) > MaxIDLen ||
			len(in.DeviceID) > MaxIDLen || len(in.Account) > MaxIDLen || !utf8.ValidString(in.Account) {
			t.Fatalf("accepted out-of-bounds input %+v", in)
		}
	})
}
