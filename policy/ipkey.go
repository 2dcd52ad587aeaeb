package policy

import "net/netip"

// DefaultIPv6Prefix is identity.ipv6_prefix when the policy does not set
// it: an IPv6 client is keyed by its /64 (7.1).
const DefaultIPv6Prefix = 64

// IPKeyPrefix returns the prefix that limits and multipliers keyed by
// `ip` key a client address by (7.1): an IPv6 address's
// identity.ipv6_prefix (default /64: one subscriber's network, which
// hands its hosts any of 2^64 addresses, so rotating through them must
// not buy fresh buckets), an IPv4 address (or IPv4-mapped IPv6) itself
// as a /32. Lists and reputation rules match whole addresses, not this.
// An invalid address gives the zero Prefix.
func (id *Identity) IPKeyPrefix(a netip.Addr) netip.Prefix {
	if !a.IsValid() {
		return netip.Prefix{}
	}
	a = a.WithZone("").Unmap()
	bits := a.BitLen()
	if a.Is6() {
		bits = id.IPv6Prefix
		if bits == 0 {
			bits = DefaultIPv6Prefix
		}
	}
	p, _ := a.Prefix(bits)
	return p
}
