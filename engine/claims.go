package engine

import (
	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
)

// Claims and proofs apart (7.1).
//
// A request that names a device id without a valid device token only
// claims it. Its limits keyed by device take from the claim's buckets
// ("{claim:id}" where a proven device's are "{device:id}"; "|%!id" as a
// further part), and besides the device's multipliers (an admin's or a
// proven device's penalty binds claims of its id too) they read the
// claim's, where riskd puts what it computed from claims (signals count
// claims apart). A proven request reads neither. So flooding requests
// that name an attested device's id never spends or lowers the budget of
// the device itself.

// ClaimSubject is the subject kind of a claimed device id.
const ClaimSubject = bucket.ClaimKind

// appendClaimTag appends the hash tag and name of limit l's bucket for a
// claim of device.
func appendClaimTag(dst []byte, prefix string, l *policy.Limit, device string) []byte {
	dst = bucket.AppendSubjectTag(dst, prefix, ClaimSubject, device)
	return bucket.AppendBucketName(dst, l.Name)
}

// claimSubject returns the index + 1 of the request's claim subject,
// appending it (neutral static multipliers: the device subject carries
// the unverified one) the first time; *of holds it.
func (e *Engine) claimSubject(d *Decision, in *Input, of *int8) int8 {
	if *of == 0 {
		d.keybuf = e.claimKeys.Append(d.keybuf, in.DeviceID)
		d.spans = append(d.spans, span{len(d.keybuf), spanSubject})
		d.breq.Subjects = append(d.breq.Subjects, bucket.RequestSubject{Static: 1, Unverified: 1})
		*of = int8(len(d.breq.Subjects))
	}
	return *of
}
