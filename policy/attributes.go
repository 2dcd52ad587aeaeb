package policy

import (
	"fmt"
	"unicode/utf8"
)

// Bounds on a request's attributes (CONTRACT 6.9).
const (
	// MaxAttributes is the most attributes one request may carry.
	MaxAttributes = 16
	// MaxAttrName bounds an attribute's name, in bytes.
	MaxAttrName = 32
	// MaxAttrValue bounds an attribute's value, in bytes.
	MaxAttrValue = 256
)

// ValidAttrName reports whether s is a valid attribute name: 1 to
// MaxAttrName bytes of a-z 0-9 _.
func ValidAttrName(s string) bool {
	if len(s) == 0 || len(s) > MaxAttrName {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// CheckAttribute applies the request rules to one attribute: a valid name
// and a value of at most MaxAttrValue bytes of printable UTF-8. It returns
// "" or what is wrong, for a message that names the attribute.
func CheckAttribute(name, value string) string {
	if !ValidAttrName(name) {
		return fmt.Sprintf("is not a valid attribute name (want 1-%d characters of a-z 0-9 _)", MaxAttrName)
	}
	if len(value) > MaxAttrValue {
		return fmt.Sprintf("is longer than %d bytes", MaxAttrValue)
	}
	if !utf8.ValidString(value) {
		return "is not valid UTF-8"
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < 0x20 || c == 0x7f {
			return "contains a control character"
		}
	}
	return ""
}

// PartName returns the i-th key part of l's `by` as written ("ip",
// "attr:plan").
func (l *Limit) PartName(i int) string {
	if l.By[i] == PartAttr && i < len(l.ByAttr) {
		return "attr:" + l.ByAttr[i]
	}
	return l.By[i].String()
}

// AttrValue returns the request's value of l's i-th key part when it is
// an attribute ("" when absent or when the part is not an attribute). It
// does not allocate.
func (l *Limit) AttrValue(i int, attrs map[string]string) string {
	if i >= len(l.ByAttr) || l.ByAttr[i] == "" {
		return ""
	}
	return attrs[l.ByAttr[i]]
}

// AttrsMatch reports whether attrs satisfy l's `if.attr`: every named
// attribute is present with one of its listed values. It does not allocate.
func (l *Limit) AttrsMatch(attrs map[string]string) bool {
	for i := range l.IfAttr {
		c := &l.IfAttr[i]
		v, ok := attrs[c.Name]
		if !ok || !contains(c.Values, v) {
			return false
		}
	}
	return true
}
