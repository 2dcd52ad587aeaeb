package reputation

// combo accumulates multipliers by the penalty rule (bucket.Combine): if
// any is below 1 the lowest applies, otherwise the highest. It remembers
// the rule that gave each extreme; on a tie, the rule listed first in the
// policy. The zero value is not neutral: start from none.
type combo struct {
	lo, hi         float64
	loRule, hiRule int32 // rule indexes; -1 when no rule was added
}

// none is the neutral combo: no rule, multiplier 1.
var none = combo{lo: 1, hi: 1, loRule: -1, hiRule: -1}

// add returns c with rule i's multiplier m added.
func (c combo) add(m float64, i int32) combo {
	if c.loRule < 0 || m < c.lo || (m == c.lo && i < c.loRule) {
		c.lo, c.loRule = m, i
	}
	if c.hiRule < 0 || m > c.hi || (m == c.hi && i < c.hiRule) {
		c.hi, c.hiRule = m, i
	}
	return c
}

// merge returns c with every rule of o added.
func (c combo) merge(o combo) combo {
	if o.loRule >= 0 {
		c = c.add(o.lo, o.loRule)
	}
	if o.hiRule >= 0 {
		c = c.add(o.hi, o.hiRule)
	}
	return c
}

// value returns the combined multiplier and the rule that decided it
// (-1 and 1 when no rule was added).
func (c combo) value() (float64, int32) {
	switch {
	case c.loRule < 0:
		return 1, -1
	case c.lo < 1:
		return c.lo, c.loRule
	default:
		return c.hi, c.hiRule
	}
}
