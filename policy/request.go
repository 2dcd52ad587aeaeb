package policy

import (
	"fmt"
	"unicode/utf8"
)

// Bounds on a request's identity, endpoint and cost, the same on every
// way a request comes in (the check API, the Envoy rate-limit service,
// the Go middleware), so that one request is valid on all of them or on
// none.
const (
	// MaxIDLen bounds user_id, device_id and account, in bytes.
	MaxIDLen = 256
	// MaxEndpointLen bounds endpoint, in bytes.
	MaxEndpointLen = 2048
	// MaxCost bounds a request's cost.
	MaxCost = 1_000_000
)

// CheckID applies the request rules to an identifier (user_id,
// device_id, account): at most MaxIDLen bytes of UTF-8 without control
// characters. It returns "" or what is wrong, for a message naming the
// field.
func CheckID(s string) string {
	if len(s) > MaxIDLen {
		return fmt.Sprintf("is longer than %d bytes", MaxIDLen)
	}
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return "contains a control character"
		}
	}
	return ""
}
