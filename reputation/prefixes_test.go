package reputation

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// bruteForce combines the entries that contain a, the slow and obvious way.
func bruteForce(entries []cidrEntry, a netip.Addr) combo {
	c := none
	for _, e := range entries {
		if normPrefix(e.prefix).Contains(a) {
			c = c.add(e.mult, e.rule)
		}
	}
	return c
}

// randomPrefix returns a prefix near base, so that random prefixes nest
// and overlap often.
func randomPrefix(rng *rand.Rand, base netip.Addr) netip.Prefix {
	b := base.AsSlice()
	bits := len(b) * 8
	// Randomize the last 12 bits, so prefixes cluster.
	for i := bits - 12; i < bits; i++ {
		if rng.IntN(2) == 1 {
			b[i/8] ^= 0x80 >> (i % 8)
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return netip.PrefixFrom(a, bits-16+rng.IntN(17)).Masked()
}

// TestPrefixTableMatchesBruteForce compares the compiled table with a
// brute-force scan over random nested, overlapping and duplicate CIDRs.
func TestPrefixTableMatchesBruteForce(t *testing.T) {
	t.Parallel()
	families := []struct {
		name string
		base netip.Addr
		bits int
	}{
		{"ipv4", netip.MustParseAddr("198.51.0.0"), 32},
		{"ipv6", netip.MustParseAddr("2001:db8::"), 128},
	}
	mults := []float64{0, 0.1, 0.5, 0.5, 1, 2, 3}
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(200) {
				rng := rand.New(rand.NewPCG(seed, 7))
				var entries []cidrEntry
				for i := range 1 + rng.IntN(12) {
					entries = append(entries, cidrEntry{
						prefix: randomPrefix(rng, f.base),
						mult:   mults[rng.IntN(len(mults))],
						rule:   int32(i),
					})
				}
				table := newPrefixTable(entries, f.bits)
				probes := []netip.Addr{f.base, f.base.Prev(), f.base.Next()}
				for _, e := range entries {
					p := e.prefix
					probes = append(probes, p.Addr(), p.Addr().Prev(), lastAddr(p), lastAddr(p).Next())
				}
				for range 50 {
					probes = append(probes, randomPrefix(rng, f.base).Addr())
				}
				for _, a := range probes {
					if !a.IsValid() {
						continue
					}
					want := bruteForce(entries, a)
					got := none
					if a.BitLen() == f.bits {
						got = table.lookup(addrKey(a))
					}
					gm, gr := got.value()
					wm, wr := want.value()
					if gm != wm || gr != wr {
						t.Fatalf("seed %d: lookup(%s) = %v (rule %d), want %v (rule %d); entries %+v",
							seed, a, gm, gr, wm, wr, entries)
					}
				}
			}
		})
	}
}

// lastAddr returns the last address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func TestPrefixTableEdges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		prefix  string
		bits    int
		in, out []string
	}{
		{"all ipv4", "0.0.0.0/0", 32, []string{"0.0.0.0", "255.255.255.255", "1.2.3.4"}, nil},
		{"last ipv4", "255.255.255.255/32", 32, []string{"255.255.255.255"}, []string{"255.255.255.254"}},
		{"first ipv4", "0.0.0.0/32", 32, []string{"0.0.0.0"}, []string{"0.0.0.1"}},
		{"all ipv6", "::/0", 128, []string{"::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}, nil},
		{"upper half ipv6", "8000::/1", 128, []string{"8000::", "ffff::1"}, []string{"7fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}},
		{"ipv6 /64", "2001:db8::/64", 128, []string{"2001:db8::ffff:ffff:ffff:ffff"}, []string{"2001:db8:0:1::"}},
		{"ipv6 /65", "2001:db8::/65", 128, []string{"2001:db8::7fff:ffff:ffff:ffff"}, []string{"2001:db8::8000:0:0:0"}},
		{"ipv6 /63", "2001:db8::/63", 128, []string{"2001:db8:0:1:ffff:ffff:ffff:ffff"}, []string{"2001:db8:0:2::"}},
		{"last ipv6", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128", 128,
			[]string{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}, []string{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			table := newPrefixTable([]cidrEntry{{prefix: netip.MustParsePrefix(tc.prefix), mult: 0.5, rule: 0}}, tc.bits)
			for _, s := range tc.in {
				if m, _ := table.lookup(addrKey(netip.MustParseAddr(s))).value(); m != 0.5 {
					t.Errorf("%s not matched by %s", s, tc.prefix)
				}
			}
			for _, s := range tc.out {
				if m, _ := table.lookup(addrKey(netip.MustParseAddr(s))).value(); m != 1 {
					t.Errorf("%s matched by %s", s, tc.prefix)
				}
			}
		})
	}
	var empty prefixTable
	if c := empty.lookup(u128{lo: 5}); c != none {
		t.Errorf("empty table: %+v", c)
	}
}
