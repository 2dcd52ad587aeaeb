package engine

import (
	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
)

// Attribute subjects (CONTRACT 7.4): a multiplier on "attr:NAME" with id
// VALUE (a velocity rule's tighten or block, an admin's PUT
// /v1/admin/multipliers/attr:NAME/VALUE) applies to the limits whose `by`
// names attr:NAME, for requests carrying that value.

// maxAttrSubjects bounds the attribute subjects of one decision: one per
// attribute a request may carry (policy.MaxAttributes), so no attribute's
// multiplier is ever dropped; with the request's other subjects (at most
// six: ip, user, device, account, asn, claim) they fit the 32-bit mask of
// a limit's subjects (bucket.MaxSubjects).
const maxAttrSubjects = policy.MaxAttributes

// The attribute subjects and the six others fit a limit's subject mask.
var _ [bucket.MaxSubjects - maxAttrSubjects - 6]struct{}

// attrSubjects remembers the attribute subjects a decision has appended.
type attrSubjects struct {
	n     int
	names [maxAttrSubjects]string
	vals  [maxAttrSubjects]string
	index [maxAttrSubjects]int // subject index + 1
}

// attrSubject appends the multiplier key of the attribute subject
// (name, val) to d's request once and returns its bit for a limit's mask
// (0 past maxAttrSubjects, which a validated Input never reaches).
func (e *Engine) attrSubject(d *Decision, seen *attrSubjects, name, val string) uint32 {
	for k := 0; k < seen.n; k++ {
		if seen.names[k] == name && seen.vals[k] == val {
			return 1 << uint(seen.index[k]-1)
		}
	}
	if seen.n == maxAttrSubjects {
		return 0
	}
	d.keybuf = bucket.AppendMultiplierKey(d.keybuf, e.o.Prefix, "attr:"+name, val)
	d.spans = append(d.spans, span{len(d.keybuf), spanSubject})
	req := &d.breq
	req.Subjects = append(req.Subjects, bucket.RequestSubject{Static: 1, Unverified: 1})
	k := seen.n
	seen.names[k], seen.vals[k], seen.index[k] = name, val, len(req.Subjects)
	seen.n++
	return 1 << uint(len(req.Subjects)-1)
}

// attrMask appends the attribute subjects of l (its attr:NAME parts) and
// returns their bits.
func (e *Engine) attrMask(d *Decision, seen *attrSubjects, l *policy.Limit, in *Input) uint32 {
	var mask uint32
	for i, part := range l.By {
		if part == policy.PartAttr {
			mask |= e.attrSubject(d, seen, l.ByAttr[i], l.AttrValue(i, in.Attributes))
		}
	}
	return mask
}
