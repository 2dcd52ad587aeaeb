package bucket

import "net/netip"

// IPSubjectID is the id text of the ip subject and key part of a client
// keyed by prefix p (policy.Identity.IPKeyPrefix, 7.1): a whole address
// (/32, /128) as netip prints it, as before prefixes ("198.51.100.7",
// "2001:db8::1"), so existing keys keep their names; a shorter prefix as
// its masked CIDR ("2001:db8:1:2::/64"). The zero Prefix gives "".
func IPSubjectID(p netip.Prefix) string {
	if !p.IsValid() {
		return ""
	}
	if p.Bits() == p.Addr().BitLen() {
		return p.Addr().String()
	}
	return p.Masked().String()
}
