package policy

import (
	"strings"

	"golang.org/x/text/unicode/norm"
)

// NormalizeAccount returns the canonical form of an account id (contract
// 6.4): surrounding white space trimmed, Unicode NFC, lower-cased, so
// `Alice@Example.com` and `alice@example.com` are one account.
func NormalizeAccount(s string) string {
	return strings.ToLower(norm.NFC.String(strings.TrimSpace(s)))
}
