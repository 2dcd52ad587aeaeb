package policy

import (
	"fmt"
	"strings"
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

// Underflows reports whether lit, the text of a number that parsed as v,
// names a nonzero number though v is 0: one too small for a float64
// (1e-999). As a multiplier it would read as 0, which blocks, so the admin
// API and the console refuse it. lit is a JSON number or any text
// strconv.ParseFloat takes (a hex float's mantissa is its hex digits).
func Underflows(lit string, v float64) bool {
	if v != 0 {
		return false
	}
	s := strings.ToLower(strings.TrimLeft(strings.TrimSpace(lit), "+-"))
	if hex, ok := strings.CutPrefix(s, "0x"); ok {
		mant, _, _ := strings.Cut(hex, "p")
		return strings.ContainsAny(mant, "123456789abcdef")
	}
	mant, _, _ := strings.Cut(s, "e")
	return strings.ContainsAny(mant, "123456789")
}
