package api

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
)

// multiplierPath is subjectPath for the multipliers and the subject
// view: the id returned is the one the subject's multipliers are stored
// under, for an ip the key the engine looks up (7.1). An IPv6 address
// addresses its identity.ipv6_prefix (default /64: 2001:db8:1:2::/64),
// as the limits keyed by ip do; the prefix itself is accepted too when
// it has that length (the subject view names it so).
func (s *Server) multiplierPath(r *http.Request) (subject, id string, aerr *apiError) {
	pol := s.o.Engine.Policy()
	if raw := r.PathValue("id"); r.PathValue("subject") == "ip" && strings.Contains(raw, "/") {
		p, err := netip.ParsePrefix(raw)
		want := pol.Identity.IPKeyPrefix(p.Addr())
		if err != nil || !p.Addr().Is6() || p.Addr().Is4In6() || p.Bits() != want.Bits() {
			return "", "", badRequest(fmt.Sprintf("id %q is not an IP address, nor an IPv6 prefix of identity.ipv6_prefix's length (/%d)",
				clip(raw), pol.Identity.IPKeyPrefix(netip.IPv6Unspecified()).Bits()))
		}
		return "ip", bucket.IPSubjectID(p), nil
	}
	subject, id, aerr = subjectPath(r)
	if aerr == nil && subject == "ip" {
		id = engine.IPKey(pol, id, netip.Addr{})
	}
	return subject, id, aerr
}

// throttleKey is the client a failed token attempt counts against (7.1):
// its address as the proxy rules find it (the peer, or behind a trusted
// proxy the right-most untrusted X-Forwarded-For address), so one
// client's wrong tokens behind a load balancer never throttle another;
// an IPv6 client by its identity.ipv6_prefix, so rotating addresses
// within it buys no fresh attempts. A peer that is no address (a Unix
// socket) counts as its RemoteAddr.
func (s *Server) throttleKey(r *http.Request) string {
	pol := s.o.Engine.Policy()
	ip, _ := clientIP(r, pol.Identity.TrustedProxies)
	if !ip.IsValid() {
		return peerHost(r.RemoteAddr)
	}
	return engine.IPKey(pol, ip.String(), ip)
}
