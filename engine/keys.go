package engine

import (
	"unsafe"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
)

// bucketKeys are the bucket key templates of a policy's limits tagged by
// a subject or global (by Limit.Index; zero for those tagged by an
// attribute), built once per policy.
type bucketKeys struct {
	p    *policy.Policy
	keys []bucket.KeyTemplate
}

// bucketKeysOf returns the bucket key templates of p.
func (e *Engine) bucketKeysOf(p *policy.Policy) *bucketKeys {
	if bk := e.bucketKeys.Load(); bk != nil && bk.p == p {
		return bk
	}
	bk := &bucketKeys{p: p, keys: make([]bucket.KeyTemplate, len(p.Limits))}
	for i := range p.Limits {
		l := &p.Limits[i]
		if len(l.By) == 0 {
			continue
		}
		if tag := l.By[tagPart(l)]; tag != policy.PartAttr {
			bk.keys[i] = bucket.NewBucketKeyTemplate(e.o.Prefix, tag.String(), l.Name)
		}
	}
	e.bucketKeys.Store(bk)
	return bk
}

// appendLimits appends to d's request every limit of the class ci that
// applies to in, with its bucket key and its subjects' multiplier keys
// (each subject once), keys built into one buffer (d.keybuf, d.spans).
func (e *Engine) appendLimits(p *policy.Policy, ci int, in *Input, d *Decision, routeVal string, verified float64, verifiedDevice bool) {
	req := &d.breq
	bk := e.bucketKeysOf(p)
	var subjOf [8]int8 // key part -> subject index + 1
	var claimOf int8   // the claim subject's index + 1 (claims.go)
	claim := in.DeviceID != "" && !verifiedDevice
	var attrs attrSubjects
	var limits []*policy.Limit
	if in.AttestationBudget {
		limits = attestationLimit(p)
	} else {
		limits = p.Applicable(ci, in.UserID != "")
	}
	for _, l := range limits {
		// Unreachable for a policy from policy.Parse, which refuses one
		// where more than policy.MaxApplicable (= bucket.MaxLimits) limits
		// can apply; a policy built by hand is cut here.
		if len(d.applied) == bucket.MaxLimits {
			break
		}
		if !limitApplies(in, l, routeVal) {
			continue
		}
		var mask uint32
		d.keybuf = e.appendBucketKey(d.keybuf, bk, l, in, routeVal, claim)
		d.spans = append(d.spans, span{len(d.keybuf), spanBucket})
		if l.TrustedOwn && verifiedDevice && in.Account != "" {
			d.appendOwnKey(e.o.Prefix, in)
		}
		for _, part := range l.By {
			if !part.IsSubject() {
				continue
			}
			if subjOf[part] == 0 {
				d.keybuf = e.multKeys[part].Append(d.keybuf, value(in, part, routeVal))
				d.spans = append(d.spans, span{len(d.keybuf), spanSubject})
				req.Subjects = append(req.Subjects, bucket.RequestSubject{})
				sub := &req.Subjects[len(req.Subjects)-1]
				sub.Static, sub.Unverified = callerMultipliers(in, part, verified)
				subjOf[part] = int8(len(req.Subjects))
			}
			mask |= 1 << uint(subjOf[part]-1)
			if part == policy.PartDevice && claim {
				mask |= 1 << uint(e.claimSubject(d, in, &claimOf)-1)
			}
		}
		if len(l.ByAttr) > 0 {
			mask |= e.attrMask(d, &attrs, l, in)
		}
		d.applied = append(d.applied, l)
		appendLimit(req, l, mask)
	}
}

// attestationLimit returns the policy's risk.attestation.max_per_ip
// limit alone, or none when the policy has none.
func attestationLimit(p *policy.Policy) []*policy.Limit {
	a := p.Risk.Attestation
	if a == nil || a.MaxPerIP == nil {
		return nil
	}
	return []*policy.Limit{a.MaxPerIP}
}

// appendLimit appends l to req with the subjects in mask, field by field
// (a literal is built on the stack and copied: its wide loads wait on the
// narrow stores that built it).
func appendLimit(req *bucket.Request, l *policy.Limit, mask uint32) {
	req.Limits = append(req.Limits, bucket.Limit{})
	bl := &req.Limits[len(req.Limits)-1]
	bl.Burst, bl.Rate, bl.Period, bl.Shadow, bl.Subjects, bl.Share = l.Burst, l.Rate, l.Period, l.Shadow, mask, l.LocalShare
	if l.Kind != policy.KindBucket {
		bl.Kind, bl.Calendar, bl.LeaseTTL = bucket.Kind(l.Kind), bucket.Calendar(l.Calendar), l.LeaseTTL
		if l.Kind == policy.KindConcurrency && req.Lease == "" && req.Cost > 0 {
			req.Lease = newLease()
		}
	}
}

// handOutKeys cuts the keys out of one string of d.keybuf and hands them
// to req in the order they were appended. With borrow, that string is
// d.keybuf itself, valid until d's next decision: only for a store that
// keeps no key past Decide.
func handOutKeys(d *Decision, req *bucket.Request, borrow bool) {
	var keys string
	if borrow {
		keys = unsafe.String(unsafe.SliceData(d.keybuf), len(d.keybuf))
	} else {
		keys = string(d.keybuf)
	}
	from, li, si := 0, 0, 0
	for _, sp := range d.spans {
		k := keys[from:sp.end]
		from = sp.end
		switch sp.kind {
		case spanLock:
			req.Locks = append(req.Locks, k)
			req.TrustKeys = append(req.TrustKeys, "")
		case spanTrust:
			req.TrustKeys[len(req.TrustKeys)-1] = k
		case spanOwn:
			req.Limits[li-1].OwnKey = k
		case spanOwnTrust:
			req.OwnTrust = k
		case spanSubject:
			req.Subjects[si].Key = k
			si++
		default:
			req.Limits[li].Key = k
			li++
		}
	}
}

// limitApplies reports whether l applies to in: its attributes match and
// every part of its key but global has a value.
func limitApplies(in *Input, l *policy.Limit, routeVal string) bool {
	if len(l.IfAttr) != 0 && !l.AttrsMatch(in.Attributes) {
		return false
	}
	for i, part := range l.By {
		if part != policy.PartGlobal && partValue(in, l, i, routeVal) == "" {
			return false
		}
	}
	return true
}

// callerMultipliers returns a subject's multipliers the caller knows: its
// static one (the request's, and for a device its attestation's verified
// multiplier combined in) and, for a device, the unverified one.
func callerMultipliers(in *Input, part policy.KeyPart, verified float64) (static, unverified float64) {
	static, unverified = 1, 1
	if in.StaticSet[part] {
		static = in.Static[part]
	}
	if part == policy.PartDevice {
		if verified != 1 {
			static = bucket.Combine(static, verified)
		}
		if in.UnverifiedSet {
			unverified = in.Unverified
		}
	}
	return static, unverified
}

// partValue returns the request's value of l's i-th key part ("" when
// absent).
func partValue(in *Input, l *policy.Limit, i int, route string) string {
	if l.By[i] == policy.PartAttr {
		return l.AttrValue(i, in.Attributes)
	}
	return value(in, l.By[i], route)
}

// value returns the request's value of a key part ("" when absent).
func value(in *Input, part policy.KeyPart, route string) string {
	switch part {
	case policy.PartIP:
		if in.ipKey != "" {
			return in.ipKey // the IPv6 prefix (7.1)
		}
		return in.IP
	case policy.PartUser:
		return in.UserID
	case policy.PartDevice:
		return in.DeviceID
	case policy.PartAccount:
		return in.Account
	case policy.PartASN:
		return in.ASN
	case policy.PartRoute:
		return route
	}
	return ""
}

// tagPart returns the index of the key part that tags l's bucket keys:
// its first subject, or its first part.
func tagPart(l *policy.Limit) int {
	for i, part := range l.By {
		if part.IsSubject() {
			return i
		}
	}
	return 0
}

// appendBucketKey appends a limit's bucket key: the hash tag of its first
// subject (or of its first part), ":b:", the limit name, then "|" and each
// further part's escaped value. bk holds the templates of l's policy.
func (e *Engine) appendBucketKey(dst []byte, bk *bucketKeys, l *policy.Limit, in *Input, route string, claim bool) []byte {
	first := tagPart(l)
	switch tag := l.By[first]; {
	case claim && tag == policy.PartDevice:
		dst = appendClaimTag(dst, e.o.Prefix, l, in.DeviceID)
	case tag == policy.PartAttr:
		dst = bucket.AppendAttrTag(dst, e.o.Prefix, l.ByAttr[first], l.AttrValue(first, in.Attributes))
		dst = bucket.AppendBucketName(dst, l.Name)
	case l.Index >= 0 && l.Index < len(bk.keys) && &bk.p.Limits[l.Index] == l:
		dst = bk.keys[l.Index].Append(dst, value(in, tag, route)) // "" for global
	default: // a limit of no policy in bk: the same bytes, built in full
		dst = bucket.AppendSubjectTag(dst, e.o.Prefix, tag.String(), value(in, tag, route))
		dst = bucket.AppendBucketName(dst, l.Name)
	}
	for i, part := range l.By {
		if i == first || part == policy.PartGlobal {
			continue
		}
		if claim && part == policy.PartDevice {
			dst = bucket.AppendClaimPart(dst, in.DeviceID)
			continue
		}
		dst = bucket.AppendKeyPart(dst, partValue(in, l, i, route))
	}
	return dst
}
