package signals

import "github.com/tollgate-dev/tollgate/bucket"

// Claims and proofs apart (7.1).
//
// A device id that a request names without its device token is a claim
// anyone can make; the same id with a valid token is the device itself.
// Signals keyed by device count the two apart: the anomaly rule counts
// decisions with DeviceVerified under the device and the others under
// the claim, and velocity rules count reports with Attested under the
// device and the others under the claim. A measure computed from claims is
// set on the subject ClaimSubject (same id), which the limiter applies
// only to requests that name the id without its token: so flooding
// requests that name an attested device's id never tightens, locks or
// spends the budget of the device itself.

// ClaimSubject is the subject kind of a device id named without its
// device token.
const ClaimSubject = bucket.ClaimKind

// claimKey is the key under which claims of device id are counted: a
// leading NUL, which no key of a proven device starts with in practice
// and which keeps the two sets of counts apart.
func claimKey(id string) string { return "\x00" + id }
