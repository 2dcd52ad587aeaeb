package reputation

import (
	"cmp"
	"encoding/binary"
	"net/netip"
	"slices"
)

// u128 is an address as an unsigned integer: IPv6 in hi and lo, IPv4 in
// lo alone.
type u128 struct{ hi, lo uint64 }

// less reports whether a < b.
func (a u128) less(b u128) bool { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo) }

// cmp compares a and b.
func (a u128) cmp(b u128) int {
	if c := cmp.Compare(a.hi, b.hi); c != 0 {
		return c
	}
	return cmp.Compare(a.lo, b.lo)
}

// next returns a+1 (wrapping).
func (a u128) next() u128 {
	a.lo++
	if a.lo == 0 {
		a.hi++
	}
	return a
}

// addrKey returns a as a u128 (IPv4 in lo).
func addrKey(a netip.Addr) u128 {
	if a.Is4() {
		b := a.As4()
		return u128{lo: uint64(binary.BigEndian.Uint32(b[:]))}
	}
	b := a.As16()
	return u128{hi: binary.BigEndian.Uint64(b[:8]), lo: binary.BigEndian.Uint64(b[8:])}
}

// prefixRange returns the first and last address of p (masked) as u128.
func prefixRange(p netip.Prefix) (first, last u128) {
	p = p.Masked()
	first = addrKey(p.Addr())
	host := p.Addr().BitLen() - p.Bits() // host bits, 0..128
	last = first
	switch {
	case host >= 128:
		last = u128{hi: ^uint64(0), lo: ^uint64(0)}
	case host >= 64:
		last.lo = ^uint64(0)
		last.hi |= (uint64(1) << (host - 64)) - 1
	default:
		last.lo |= (uint64(1) << host) - 1
	}
	return first, last
}

// maxKey returns the last address of the family with the given bit length.
func maxKey(bits int) u128 {
	if bits == 32 {
		return u128{lo: 1<<32 - 1}
	}
	return u128{hi: ^uint64(0), lo: ^uint64(0)}
}

// cidrEntry is one CIDR of one rule, before compilation.
type cidrEntry struct {
	prefix netip.Prefix
	mult   float64
	rule   int32
}

// prefixTable maps an address of one family to the combined multiplier of
// the CIDRs covering it. starts[i] is the first address of a range that
// extends to starts[i+1]-1 (the last range to the family's end); combos[i]
// is its combined multiplier (none for gaps). A lookup is a binary search
// and allocates nothing. The zero value matches nothing.
type prefixTable struct {
	starts []u128
	combos []combo
}

// newPrefixTable compiles the entries of one family (bits 32 or 128).
//
// CIDRs are nested or disjoint, so sorted by first address and, for equal
// first addresses, widest first, every CIDR lies inside the ones still
// open on a stack: its range gets the open ones' combination plus its own,
// and when it closes the range after it goes back to its parent's.
func newPrefixTable(entries []cidrEntry, bits int) prefixTable {
	var t prefixTable
	end := maxKey(bits)
	var stack []span // open CIDRs; c is the accumulated combination
	pop := func() {
		top := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if top.last == end {
			return
		}
		parent := none
		if len(stack) > 0 {
			parent = stack[len(stack)-1].c
		}
		t.emit(top.last.next(), parent)
	}
	for _, s := range sortedSpans(entries) {
		for len(stack) > 0 && stack[len(stack)-1].last.less(s.first) {
			pop()
		}
		acc := s.c
		if len(stack) > 0 {
			acc = stack[len(stack)-1].c.merge(s.c)
		}
		t.emit(s.first, acc)
		stack = append(stack, span{first: s.first, last: s.last, c: acc})
	}
	for len(stack) > 0 {
		pop()
	}
	t.compact()
	return t
}

// span is one CIDR's addresses and its combination.
type span struct {
	first, last u128
	c           combo
}

// sortedSpans returns the entries' CIDRs as spans sorted by first address,
// widest first among equal ones, the same CIDR named by several rules
// merged into one.
func sortedSpans(entries []cidrEntry) []span {
	spans := make([]span, 0, len(entries))
	for _, e := range entries {
		first, last := prefixRange(e.prefix)
		spans = append(spans, span{first: first, last: last, c: none.add(e.mult, e.rule)})
	}
	slices.SortFunc(spans, func(a, b span) int {
		if c := a.first.cmp(b.first); c != 0 {
			return c
		}
		return b.last.cmp(a.last) // wider first
	})
	merged := spans[:0]
	for _, s := range spans {
		if n := len(merged); n > 0 && merged[n-1].first == s.first && merged[n-1].last == s.last {
			merged[n-1].c = merged[n-1].c.merge(s.c)
			continue
		}
		merged = append(merged, s)
	}
	return merged
}

// emit starts a range at start with combination c (replacing the
// combination of a range that starts there too).
func (t *prefixTable) emit(start u128, c combo) {
	if n := len(t.starts); n > 0 && t.starts[n-1] == start {
		t.combos[n-1] = c
		return
	}
	t.starts = append(t.starts, start)
	t.combos = append(t.combos, c)
}

// compact drops the ranges that repeat the previous one's combination and
// a leading gap.
func (t *prefixTable) compact() {
	n := 0
	for i := range t.starts {
		if n > 0 && t.combos[n-1] == t.combos[i] {
			continue
		}
		if n == 0 && t.combos[i] == none {
			continue
		}
		t.starts[n], t.combos[n] = t.starts[i], t.combos[i]
		n++
	}
	t.starts, t.combos = slices.Clip(t.starts[:n]), slices.Clip(t.combos[:n])
}

// lookup returns the combination of the CIDRs covering k.
func (t *prefixTable) lookup(k u128) combo {
	// Find the last start <= k.
	lo, hi := 0, len(t.starts)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if k.less(t.starts[m]) {
			hi = m
		} else {
			lo = m + 1
		}
	}
	if lo == 0 {
		return none
	}
	return t.combos[lo-1]
}

// len returns the number of ranges in the table.
func (t *prefixTable) len() int { return len(t.starts) }
