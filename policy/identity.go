package policy

import (
	"strings"

	"golang.org/x/text/unicode/norm"
)

// NormalizeAccount returns the canonical form of an account id: surrounding
// white space trimmed, Unicode NFC, lower-cased (CONTRACT 6.4), so that
// "Alice@Example.com" and "alice@example.com" are one account. It does not
// allocate when s is already canonical.
func NormalizeAccount(s string) string {
	return strings.ToLower(norm.NFC.String(strings.TrimSpace(s)))
}
