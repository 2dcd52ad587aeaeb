package reputation

import (
	"fmt"
	"net/netip"

	"github.com/tollgate-dev/tollgate/policy"
)

// Rules are the compiled `risk.reputation` rules of one policy, with the
// ASN database they match against. Rules is immutable and safe for
// concurrent use; it follows the DB's hot reloads. A nil *Rules matches
// nothing.
type Rules struct {
	db      *DB
	rules   []policy.ReputationRule
	asns    map[uint32]combo // AS number -> combination of the ASN rules naming it
	v4, v6  prefixTable
	hasASNs bool // some rule names AS numbers
}

// Result is what Rules.Lookup knows about a client IP.
type Result struct {
	// ASN is the IP's autonomous system number, Org its organization;
	// HasASN is false (and ASN 0) when there is no database or it has no AS
	// number for the IP.
	ASN    uint32
	HasASN bool
	Org    string
	// IP is the reputation multiplier of the request's ip subject: the
	// combination of the CIDR rules and the ASN rules that match. It is 1
	// when none matches.
	IP float64
	// IPRule is the index in policy.Reputation.Rules of the rule that
	// decided IP, -1 when none; IPReason is that rule's reason.
	IPRule   int
	IPReason string
	// ASNMult is the reputation multiplier of the request's asn subject:
	// the combination of the ASN rules naming ASN. It is 1 when none does,
	// and when HasASN is false.
	ASNMult float64
	// ASNRule is the index of the rule that decided ASNMult, -1 when none;
	// ASNReason is that rule's reason.
	ASNRule   int
	ASNReason string
}

// New compiles the reputation section rep (nil for none) against db (nil
// when no asn_database is configured). Without db, rules naming AS numbers
// cannot match: Inactive lists them. The policy is assumed validated
// (multipliers >= 0; every rule names AS numbers, CIDRs or both).
func New(rep *policy.Reputation, db *DB) *Rules {
	r := &Rules{db: db}
	if rep == nil {
		return r
	}
	r.rules = rep.Rules
	var v4, v6 []cidrEntry
	for i, rule := range rep.Rules {
		idx := int32(i)
		for _, p := range rule.CIDRs {
			if !p.IsValid() {
				continue
			}
			p = normPrefix(p)
			e := cidrEntry{prefix: p, mult: rule.Multiplier, rule: idx}
			if p.Addr().Is4() {
				v4 = append(v4, e)
			} else {
				v6 = append(v6, e)
			}
		}
		if len(rule.ASNs) > 0 {
			r.hasASNs = true
			if r.asns == nil {
				r.asns = make(map[uint32]combo)
			}
			for _, asn := range rule.ASNs {
				c, ok := r.asns[asn]
				if !ok {
					c = none
				}
				r.asns[asn] = c.add(rule.Multiplier, idx)
			}
		}
	}
	r.v4 = newPrefixTable(v4, 32)
	r.v6 = newPrefixTable(v6, 128)
	return r
}

// normPrefix masks p and turns an IPv4-mapped IPv6 prefix of /96 or
// longer (::ffff:10.0.0.0/104) into its IPv4 prefix (10.0.0.0/8), since
// lookups unmap addresses too.
func normPrefix(p netip.Prefix) netip.Prefix {
	p = p.Masked()
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p
}

// Lookup returns the ASN and the reputation multipliers of a request from
// ip. It does not allocate (but for the first lookup of each database
// record after a reload). An invalid ip gets the neutral result.
func (r *Rules) Lookup(ip netip.Addr) Result {
	res := Result{IP: 1, IPRule: -1, ASNMult: 1, ASNRule: -1}
	if r == nil || !ip.IsValid() {
		return res
	}
	ip = ip.Unmap()
	var c combo
	if ip.Is4() {
		c = r.v4.lookup(addrKey(ip))
	} else {
		c = r.v6.lookup(addrKey(ip))
	}
	if r.db != nil {
		if asn, org, ok := r.db.Lookup(ip); ok {
			res.ASN, res.Org, res.HasASN = asn, org, true
			if a, ok := r.asns[asn]; ok {
				c = c.merge(a)
				m, i := a.value()
				res.ASNMult, res.ASNRule, res.ASNReason = m, int(i), r.rules[i].Reason
			}
		}
	}
	if m, i := c.value(); i >= 0 {
		res.IP, res.IPRule, res.IPReason = m, int(i), r.rules[i].Reason
	}
	return res
}

// DB returns the database the rules match AS numbers against (nil when
// none is configured).
func (r *Rules) DB() *DB {
	if r == nil {
		return nil
	}
	return r.db
}

// Active reports whether some rule can match: a CIDR rule, or an ASN rule
// with a database. When it is false and DB is nil, Lookup always returns
// the neutral result and callers may skip it.
func (r *Rules) Active() bool {
	if r == nil {
		return false
	}
	return r.v4.len() > 0 || r.v6.len() > 0 || (r.db != nil && len(r.asns) > 0)
}

// Inactive describes the rules whose AS numbers cannot match because no
// ASN database is configured, one line each ("" entries never); nil when
// there is a database or no rule names AS numbers. A rule that also names
// CIDRs still applies through them, and the line says so.
func (r *Rules) Inactive() []string {
	if r == nil || r.db != nil || !r.hasASNs {
		return nil
	}
	var out []string
	for i, rule := range r.rules {
		if len(rule.ASNs) == 0 {
			continue
		}
		s := fmt.Sprintf("reputation rule %d (line %d, reason %q): asns %v need risk.reputation.asn_database",
			i+1, rule.Line, rule.Reason, rule.ASNs)
		if len(rule.CIDRs) > 0 {
			s += "; its cidrs still apply"
		}
		out = append(out, s)
	}
	return out
}

// Rules returns the policy rules r was compiled from, indexed as
// Result.IPRule and Result.ASNRule. The slice must not be modified.
func (r *Rules) Rules() []policy.ReputationRule {
	if r == nil {
		return nil
	}
	return r.rules
}

// ASN returns the reputation multiplier of the asn subject asn (the
// combination of the ASN rules naming it) and the reason of the rule that
// decided it; ok is false when no rule names asn.
func (r *Rules) ASN(asn uint32) (mult float64, reason string, ok bool) {
	if r == nil {
		return 1, "", false
	}
	c, found := r.asns[asn]
	if !found {
		return 1, "", false
	}
	m, i := c.value()
	if i < 0 {
		return 1, "", false
	}
	return m, r.rules[i].Reason, true
}
