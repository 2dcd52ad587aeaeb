package engine

import (
	"net/netip"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
)

// Outcome is what a decision concluded.
type Outcome uint8

// Outcomes, in the order the API maps them to statuses.
const (
	// Allowed: every enforced limit had the tokens (200).
	Allowed Outcome = iota
	// Limited: a limit denied (429 RATE_LIMITED).
	Limited
	// Locked: the account is locked out (429 ACCOUNT_LOCKED).
	Locked
	// StepUp: the account must pass step-up first (403 STEP_UP_REQUIRED).
	StepUp
	// Unavailable: the store is down and a limit fails closed (503).
	Unavailable
	// Degraded: the store is down and every limit fails open (200 + X-RateLimit-Degraded).
	Degraded
	// AllowedList: the request is on an allow list, exempt from every
	// limit (200, no store call).
	AllowedList
	// DeniedList: the request is on a deny list (403 DENIED, no store call).
	DeniedList
)

// String returns the outcome's metric result label.
func (o Outcome) String() string {
	switch o {
	case Limited:
		return ResultLimited
	case Locked:
		return ResultLocked
	case StepUp:
		return ResultStepUp
	case Unavailable:
		return ResultUnavailable
	case Degraded:
		return ResultDegraded
	case AllowedList:
		return ResultAllowedList
	case DeniedList:
		return ResultDeniedList
	}
	return ResultAllowed
}

// Input is one request to decide on. IP is required; an empty Endpoint
// means the request matches no route (class DefaultClass), as an Envoy
// descriptor set without a method and path does.
type Input struct {
	// Endpoint is "METHOD /path".
	Endpoint string
	// IP is the client address, already validated.
	IP string
	// Addr is IP parsed, when the caller has it (saves a parse for
	// reputation lookups); the zero value means parse IP.
	Addr netip.Addr
	// UserID, DeviceID, Account and ASN are optional key parts; a limit
	// keyed by a part the request lacks does not apply to it. A non-empty
	// UserID means the request is authenticated.
	UserID, DeviceID, Account, ASN string
	// Attributes are the request's attributes (CONTRACT 6.9), already
	// validated (policy.CheckAttribute, at most policy.MaxAttributes): the
	// values of `attr:NAME` key parts and `if.attr` conditions. nil means
	// none. The engine only reads the map.
	Attributes map[string]string
	// Cost is the number of tokens to take (>= 0).
	Cost float64
	// Now, when set, is the decision time for stores with an injected
	// clock (tests); the zero value is the store's clock.
	Now time.Time
	// Static holds multipliers the caller already knows per subject kind
	// (reputation), indexed by policy.KeyPart, where StaticSet says so
	// (0 is a valid multiplier: it blocks).
	Static    [8]float64
	StaticSet [8]bool
	// Unverified, when UnverifiedSet, is the device subject's multiplier
	// while it has no valid attestation (policy unverified_multiplier).
	Unverified    float64
	UnverifiedSet bool
	// DeviceToken is the device token the request presented (6.3), for
	// the caller to verify; the engine never reads it.
	DeviceToken string
	// DeviceVerified reports that the request presented a valid device
	// token for DeviceID (6.3): only then does the device count as
	// attested (the policy's verified_multiplier applies to its device
	// subject, and exempt_attested locks spare it when it is in the
	// account's trusted devices). Otherwise unverified_multiplier applies,
	// whatever is stored for the device.
	DeviceVerified bool
	// AttestationBudget marks the decision of an attestation (POST
	// /v1/attest/apple or /v1/attest/android) that verified and binds a
	// new device id: it is decided against the policy's
	// risk.attestation.max_per_ip limit alone (policy.Attestation.MaxPerIP,
	// keyed by its IP), no route limit and no lock, which were decided
	// when the request arrived (api Server.Guard). Allowed, without a
	// store call, when the policy has none.
	AttestationBudget bool

	// ipKey is the ip key part's value (IPKey), set by Decide.
	ipKey string
}

// Decision is the outcome of Decide. It can be reused across calls.
type Decision struct {
	Outcome Outcome
	// Class is the request's route class; Route the matched route's
	// `match` ("" when none matched).
	Class, Route string
	// Binding is the binding limit (nil when no limit applied).
	Binding *policy.Limit
	// Limit is the binding limit's effective burst, Remaining its whole
	// tokens left, Reset when it is full again, Window its rate's period.
	Limit, Remaining int64
	Reset            time.Time
	Window           time.Duration
	// RetryAfter is the exact wait for Cost tokens (Limited), the lock's
	// time left (Locked) or a hint (Unavailable).
	RetryAfter time.Duration
	// Lock describes the lock of a Locked or StepUp outcome; LockScope is
	// the subject kind it is on ("account", "ip", "user" or "device").
	Lock      bucket.Lock
	LockScope string
	// Now is the decision time.
	Now time.Time
	// Err is the store error behind Unavailable and Degraded.
	Err error
	// List is the list that decided an AllowedList or DeniedList outcome.
	List *policy.List
	// fromL1 is set when the L1 cache answered without the store.
	fromL1 bool
	// abandoned is set when the caller went away before the store
	// answered: the failure mode answered, counted as abandoned.
	abandoned bool
	// lease is the lease id of the slots the decision took (LeaseID).
	lease string

	applied []*policy.Limit
	breq    bucket.Request
	bres    bucket.Result
	keybuf  []byte
	spans   []span
}

// span is one key in Decision.keybuf: where it ends and what it is.
type span struct {
	end  int
	kind uint8 // spanBucket, spanSubject or spanLock
}

const (
	spanBucket uint8 = iota
	spanSubject
	spanLock
	spanTrust    // the trust set of the lock just before it
	spanOwn      // the own bucket of the limit just before it (trusted_devices: own)
	spanOwnTrust // the trust set that decides whether own buckets are used
)

// LeaseID returns the lease id of the concurrency slots an Allowed
// decision took ("" when it took none): Engine.Release frees them.
func (d *Decision) LeaseID() string { return d.lease }

// FromL1 reports whether the L1 cache answered without asking the store.
func (d *Decision) FromL1() bool { return d.fromL1 }

// Applied returns the limits that applied to the request, in policy order.
func (d *Decision) Applied() []*policy.Limit { return d.applied }

// LimitResult returns the store's result for the i-th applied limit (valid
// when Outcome is Allowed or Limited).
func (d *Decision) LimitResult(i int) bucket.LimitResult { return d.bres.Limits[i] }

var decisionPool = sync.Pool{New: func() any { return new(Decision) }}

// GetDecision returns a Decision from a pool; PutDecision gives it back.
func GetDecision() *Decision { return decisionPool.Get().(*Decision) }

// PutDecision returns d to the pool; d must not be used afterwards.
func PutDecision(d *Decision) { decisionPool.Put(d) }
