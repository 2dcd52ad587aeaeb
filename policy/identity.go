package policy

import (
	"strings"

	"golang.org/x/text/unicode/norm"
)

// NormalizeAccount returns the canonical form of an account id (6.4):
// surrounding white space trimmed, Unicode NFC, lower-cased, so that
// "Alice@Example.com" and " alice@example.com" are one account. Every
// path that takes an account (check, report, proxy, forward auth, Envoy,
// admin, riskd) applies it before keying anything.
func NormalizeAccount(s string) string {
	return strings.ToLower(norm.NFC.String(strings.TrimSpace(s)))
}
