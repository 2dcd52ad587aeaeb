package bucket

import (
	"net/netip"
	"testing"
)

func TestIPSubjectID(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"198.51.100.7/32", "198.51.100.7"},
		{"2001:db8::1/128", "2001:db8::1"},
		{"2001:db8:1:2:aaaa::1/64", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff:ffff:ffff:ffff/64", "2001:db8:1:2::/64"},
		{"2001:db8:1:2::9/56", "2001:db8:1::/56"},
	} {
		if got := IPSubjectID(netip.MustParsePrefix(c.in)); got != c.want {
			t.Errorf("IPSubjectID(%s) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := IPSubjectID(netip.Prefix{}); got != "" {
		t.Errorf("zero prefix: %q", got)
	}
}
