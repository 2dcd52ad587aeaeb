package policy

import (
	"net/netip"
	"time"
)

// KeyPart names one part of a limit's key, as written in a limit's `by` list.
type KeyPart uint8

// The key parts a limit may be keyed by.
const (
	PartGlobal KeyPart = iota + 1
	PartIP
	PartUser
	PartDevice
	PartAccount
	PartASN
	PartRoute
)

// String returns the key part as written in the policy file ("ip", "route", ...).
func (k KeyPart) String() string {
	switch k {
	case PartGlobal:
		return "global"
	case PartIP:
		return "ip"
	case PartUser:
		return "user"
	case PartDevice:
		return "device"
	case PartAccount:
		return "account"
	case PartASN:
		return "asn"
	case PartRoute:
		return "route"
	}
	return "unknown"
}

// IsSubject reports whether the key part names a subject that can carry
// multipliers (ip, user, device, account, asn).
func (k KeyPart) IsSubject() bool {
	switch k {
	case PartIP, PartUser, PartDevice, PartAccount, PartASN:
		return true
	}
	return false
}

// FailureMode says what a limit does when its store cannot be reached.
type FailureMode uint8

// Failure modes. The zero value is FailOpen.
const (
	FailOpen FailureMode = iota
	FailClosed
)

// String returns "open" or "closed".
func (m FailureMode) String() string {
	if m == FailClosed {
		return "closed"
	}
	return "open"
}

// DefaultClass is the class of a request that matches no route (and of every
// request when the policy has no routes).
const DefaultClass = "default"

// Policy is a parsed and validated policy file. It is immutable once built
// and safe for concurrent use.
type Policy struct {
	// Source is the file name the policy was read from ("" for built-in).
	Source string
	// Version is the file's `version` (always 1 today).
	Version int
	// Identity is the `identity` section (reverse-proxy mode).
	Identity Identity
	// Routes are the `routes`, in file order (first match wins).
	Routes []Route
	// Limits are the `limits`, in file order.
	Limits []Limit
	// Classes lists every class name: those of the routes, in order of first
	// appearance, then DefaultClass last. Class indexes below index this slice.
	Classes []string
	// FailureDefault is `failure_mode.default` (FailOpen when unset).
	FailureDefault FailureMode
	// FailureByClass holds the per-class entries of `failure_mode`.
	FailureByClass map[string]FailureMode
	// Risk is the `risk` section.
	Risk Risk

	// applicable[classIndex*2+auth] lists the limits whose `if` matches.
	applicable [][]*Limit
	// indexed is set once index has filled the lookups below (and
	// applicable); a Policy built by hand answers from its exported fields.
	indexed      bool
	defaultIndex int
	classFailure []FailureMode // by class index
	byName       map[string]*Limit
	// sum is the SHA-256 of the file the policy was parsed from.
	sum [32]byte
}

// Identity is the `identity` section: how the reverse proxy finds who is calling.
type Identity struct {
	TrustedProxies      []netip.Prefix
	UserHeader          string
	UserSignatureHeader string
	UserSignatureKeyEnv string
	DeviceHeader        string
	AccountBodyField    string
}

// Route is one entry of `routes`.
type Route struct {
	// Match is the route as written: "METHOD /path-glob".
	Match string
	// Method is the method part ("*" matches any method).
	Method string
	// Pattern is the path glob; `*` matches any run of characters, `/` included.
	Pattern string
	// Class is the route's class name; ClassIndex its index in Policy.Classes.
	Class      string
	ClassIndex int
	// Line is the line of the route in the policy file.
	Line int
}

// Limit is one entry of `limits`.
type Limit struct {
	// Index is the limit's position in Policy.Limits.
	Index int
	// Name is the limit's unique name.
	Name string
	// By lists the key parts, in file order.
	By []KeyPart
	// Rate is N of `rate: N/period`: tokens refilled per Period.
	Rate float64
	// Period is the rate's period: 1s, 1m or 1h.
	Period time.Duration
	// RateText is `rate` as written in the file ("60/min").
	RateText string
	// Burst is the bucket capacity in tokens: `burst` as written, else Rate
	// (but at least 1, so that a bucket can always hold one request).
	Burst float64
	// Shadow marks a limit that is evaluated and counted but never denies.
	Shadow bool
	// IfAuthenticated restricts the limit to (un)authenticated requests when non-nil.
	IfAuthenticated *bool
	// IfClasses restricts the limit to these classes when non-empty.
	IfClasses []string
	// FailureMode is the limit's own `failure_mode`, if it sets one.
	FailureMode *FailureMode
	// Line is the line of the limit in the policy file.
	Line int
}

// Risk is the `risk` section.
type Risk struct {
	Velocity       []VelocityRule
	Anomaly        *Anomaly
	Reputation     *Reputation
	Attestation    *Attestation
	RepeatOffender *RepeatOffender
}

// VelocityRule is one entry of `risk.velocity`.
type VelocityRule struct {
	Name      string
	Event     string // login_failed, login_succeeded, step_up_passed
	By        KeyPart
	Threshold int
	Window    time.Duration
	Action    string // lockout | step_up | tighten
	Duration  time.Duration
	// Multiplier applies to action tighten.
	Multiplier float64
	// Escalate is optional: each repeat within 24 h lasts Factor times longer, capped at Max.
	Escalate       *Escalate
	ExemptAttested bool
	Line           int
}

// Escalate is a velocity rule's `escalate`.
type Escalate struct {
	Factor float64
	Max    time.Duration
}

// Anomaly is `risk.anomaly`.
type Anomaly struct {
	By          KeyPart
	Factor      float64
	ShortWindow time.Duration
	LongWindow  time.Duration
	// MinBaseline is the baseline floor in events per second.
	MinBaseline float64
	Multiplier  float64
	Duration    time.Duration
}

// Reputation is `risk.reputation`.
type Reputation struct {
	ASNDatabase string
	Rules       []ReputationRule
}

// ReputationRule is one entry of `risk.reputation.rules`.
type ReputationRule struct {
	ASNs       []uint32
	CIDRs      []netip.Prefix
	Multiplier float64
	Reason     string
	Line       int
}

// Attestation is `risk.attestation`.
type Attestation struct {
	VerifiedMultiplier   float64
	UnverifiedMultiplier float64 // 0 when unset (no penalty)
	UnverifiedSet        bool
	ValidFor             time.Duration
	Apple                *AppleAttestation
	Android              *AndroidAttestation
}

// AppleAttestation is `risk.attestation.apple`.
type AppleAttestation struct {
	AppID       string
	Environment string // production | development
	RootCAFile  string
}

// AndroidAttestation is `risk.attestation.android`.
type AndroidAttestation struct {
	PackageName        string
	DecryptionKeyEnv   string
	VerificationKeyEnv string
	MaxAge             time.Duration // default 5m
	// RequireStrongIntegrity demands MEETS_STRONG_INTEGRITY.
	RequireStrongIntegrity bool
}

// RepeatOffender is `risk.repeat_offender`.
type RepeatOffender struct {
	PerMinute int
}
