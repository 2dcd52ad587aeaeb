// Package visible shows text that clients chose to the people who act on
// it (the console's operators, an alert's readers) as it is: a Unicode
// format character (category Cf: the bidirectional overrides and
// isolates, zero-width spaces and joiners) and every space but ASCII's
// are written [U+XXXX], so that an account named "ceo\u202emoc.elpmaxe@"
// does not render as ceo@example.com, nor a device "alice-phone\u00a0" as
// alice-phone.
package visible

import (
	"fmt"
	"strings"
	"unicode"
)

// Format returns s with each Unicode format character and non-ASCII
// space written [U+XXXX].
func Format(s string) string {
	if !strings.ContainsFunc(s, isFormat) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if isFormat(r) {
			fmt.Fprintf(&b, "[U+%04X]", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// isFormat reports whether r is a Unicode format character, or a space
// other than ASCII's (no-break, en, ideographic, line and paragraph
// separators: category Z), which renders as a plain space or as nothing
// at the end of an id: "alice-phone\u00a0" must not read as alice-phone.
func isFormat(r rune) bool {
	return r >= 0x80 && (unicode.Is(unicode.Cf, r) || unicode.In(r, unicode.Zs, unicode.Zl, unicode.Zp))
}
