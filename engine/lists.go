package engine

import (
	"net/netip"
	"strconv"

	"github.com/tollgate-dev/tollgate/policy"
)

// ListMatch returns the list that decides a request like in, as Decide
// would: the first deny list it is on (deny true), else the first allow
// list, else nil. It makes no store call. It fills in.ASN from the
// reputation rules when unset (reports carry no ASN).
func (e *Engine) ListMatch(in *Input) (l *policy.List, deny bool) {
	p := e.o.Policy()
	if !p.HasLists() {
		return nil, false
	}
	addr := in.Addr
	if !addr.IsValid() {
		addr, _ = netip.ParseAddr(in.IP)
	}
	if in.ASN == "" && addr.IsValid() && e.o.Reputation != nil {
		if rules := e.o.Reputation(); rules != nil {
			if res := rules.Lookup(addr); res.HasASN {
				in.ASN = strconv.FormatUint(uint64(res.ASN), 10)
			}
		}
	}
	var d Decision
	if !e.listed(p, in, &d) {
		return nil, false
	}
	return d.List, d.Outcome == DeniedList
}

// listed decides d by the policy's lists when the request is on one; it
// reports whether it did.
func (e *Engine) listed(p *policy.Policy, in *Input, d *Decision) bool {
	q := policy.ListQuery{Addr: in.Addr, ASN: in.ASN, UserID: in.UserID, DeviceID: in.DeviceID,
		DeviceProven: in.DeviceVerified && in.DeviceID != "", Account: in.Account, Attributes: in.Attributes}
	if !q.Addr.IsValid() {
		q.Addr, _ = netip.ParseAddr(in.IP)
	}
	l, deny := p.MatchLists(&q)
	if l == nil {
		return false
	}
	d.List = l
	d.Outcome = AllowedList
	if deny {
		d.Outcome = DeniedList
	}
	return true
}
