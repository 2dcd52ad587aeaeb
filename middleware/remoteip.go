package middleware

import (
	"net/http"
	"net/netip"
	"strings"
)

// RemoteIP returns an IP finder for Identify. It answers the peer address
// (http.Request.RemoteAddr) unless the peer is one of the trusted proxies;
// then it walks X-Forwarded-For from right to left (several header lines
// count as one list, in order) and answers the first address that is not a
// trusted proxy: the address the outermost trusted proxy saw. Addresses a
// client wrote further left are never believed, and X-Forwarded-For from
// an untrusted peer is ignored.
//
// When every address in the chain is trusted, it answers the left-most.
// Empty entries are skipped. When it meets an entry that is not an IP
// address, it stops and answers the last trusted address it walked, so
// garbage cannot pick a bucket. This is the limiter's reverse-proxy rule
// (identity.trusted_proxies), so both give a request the same IP.
// Addresses may carry a port ("198.51.100.7:443", "[2001:db8::1]:443");
// IPv4-mapped IPv6 addresses become IPv4 and zones are dropped. A
// RemoteAddr that is not an address (a Unix socket) answers "", which
// Identify should treat as unknown.
//
// trusted prefixes are masked; a nil list trusts no proxy. The returned
// function is safe for concurrent use.
func RemoteIP(trusted []netip.Prefix) func(r *http.Request) string {
	prefixes := make([]netip.Prefix, 0, len(trusted))
	for _, p := range trusted {
		if p.IsValid() {
			prefixes = append(prefixes, p.Masked())
		}
	}
	isTrusted := func(a netip.Addr) bool {
		for _, p := range prefixes {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) string {
		peer, ok := parseAddr(r.RemoteAddr)
		if !ok {
			return ""
		}
		if !isTrusted(peer) {
			return peer.String()
		}
		last := peer
		xff := r.Header.Values("X-Forwarded-For")
		for i := len(xff) - 1; i >= 0; i-- {
			list := xff[i]
			for {
				entry := list
				cut := strings.LastIndexByte(list, ',')
				if cut >= 0 {
					entry, list = list[cut+1:], list[:cut]
				}
				if entry = strings.TrimSpace(entry); entry != "" {
					a, ok := parseAddr(entry)
					if !ok {
						return last.String()
					}
					if !isTrusted(a) {
						return a.String()
					}
					last = a
				}
				if cut < 0 {
					break
				}
			}
		}
		return last.String()
	}
}

// parseAddr parses "addr", "addr:port", "[v6]" or "[v6]:port", dropping
// the zone and unmapping IPv4-in-IPv6.
func parseAddr(s string) (netip.Addr, bool) {
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
