package policy

import (
	"strings"

	"golang.org/x/text/unicode/norm"
)

// NormalizeAccount returns the canonical form of an account id (6.4):
// surrounding white space trimmed, Unicode NFKC, lower-cased, so that
// "Alice@Example.com" and " alice@example.com" are one account. NFKC is
// NFC after a compatibility decomposition, so its result is NFC as 6.4
// says, and it also makes one account of the spellings an upstream that
// applies it takes as one: Django's login form normalises the username
// with NFKC, so "\uff46\uff52\uff41\uff4e\uff4b" (fullwidth letters)
// logs in as frank (TestAttackFullwidthAccountEscapesAccountLimit). Every
// path that takes an account (check, report, proxy, forward auth, Envoy,
// admin, riskd) applies it before keying anything, and some apply it to
// an account normalised already (riskd to what a limiter published), so
// it is idempotent: the lower-cased form is normalised again, for a
// capital that has no precomposed form with its mark lower-cases to a
// letter that has one ("J\u030c" -> "j\u030c" -> "\u01f0"), and
// trimmed again, for a compatibility character may decompose to a space
// and a mark.
func NormalizeAccount(s string) string {
	s = strings.ToLower(norm.NFKC.String(strings.TrimSpace(s)))
	return strings.TrimSpace(norm.NFKC.String(s))
}
