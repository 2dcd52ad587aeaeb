package engine

import (
	"net/netip"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
)

// IPKey returns the value limits, multipliers and locks keyed by ip use
// for a client address under p (7.1): the address itself for IPv4 (and
// with identity.ipv6_prefix 128), else its IPv6 prefix (default /64) as
// bucket.IPSubjectID writes it (riskd's signals count and lock by the
// same id). Lists, reputation and events keep the whole address. It returns ip itself when that is already its
// key, without allocating; an address that does not parse is returned
// as it is.
func IPKey(p *policy.Policy, ip string, addr netip.Addr) string {
	if !addr.IsValid() {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			return ip
		}
		addr = a
	}
	if addr.Is4() || addr.Is4In6() || p.Identity.IPv6Prefix == 128 {
		return ip
	}
	return bucket.IPSubjectID(p.Identity.IPKeyPrefix(addr))
}
