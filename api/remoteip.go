package api

import "net/netip"

// hopAddr reads one X-Forwarded-For entry as the address it names (7.1):
// "addr", "addr:port", "[v6]" or "[v6]:port" (some load balancers append
// the client's port), the zone dropped and IPv4-in-IPv6 unmapped, so
// every spelling of one client is one address: it meets the deny lists
// and gets its own bucket, and no port or zone picks a fresh bucket. It
// is middleware.RemoteIP's reading, so both give a request the same IP.
func hopAddr(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.WithZone("").Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().WithZone("").Unmap(), true
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.WithZone("").Unmap(), true
		}
	}
	return netip.Addr{}, false
}
