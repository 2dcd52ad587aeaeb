package policy

import (
	"strings"

	"golang.org/x/text/unicode/norm"
)

// NormalizeAccount returns the canonical form of an account id (6.4):
// surrounding white space trimmed, Unicode NFC, lower-cased, so that
// "Alice@Example.com" and " alice@example.com" are one account. Every
// path that takes an account (check, report, proxy, forward auth, Envoy,
// admin, riskd) applies it before keying anything, and some apply it to
// an account normalised already (riskd to what a limiter published), so
// it is idempotent: the lower-cased form is composed again, for a capital
// that has no precomposed form with its mark lower-cases to a letter that
// has one ("J\u030c" -> "j\u030c" -> "\u01f0").
func NormalizeAccount(s string) string {
	return norm.NFC.String(strings.ToLower(norm.NFC.String(strings.TrimSpace(s))))
}
