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
	// PartAttr is an attribute (`attr:NAME`); the attribute's name is in
	// Limit.ByAttr at the same index of By.
	PartAttr
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
	case PartAttr:
		return "attr"
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
	// Envoy is the `envoy` section (nil when absent: the Envoy rate-limit
	// service then answers every request OK with no limit).
	Envoy *Envoy
	// Alerting is the `alerting` section (nil when absent: alerts are
	// published on NATS and delivered nowhere else).
	Alerting *Alerting
	// Lists are the `lists`, in file order; Allow and Deny the lists
	// named by `allow` and `deny`, in file order. A request on a deny list
	// is denied; else one on an allow list is exempt from every limit.
	Lists       []*List
	Allow, Deny []*List

	// applicable[classIndex*2+auth] lists the limits whose `if` matches.
	applicable [][]*Limit
	// indexed is set once index has filled the lookups below (and
	// applicable); a Policy built by hand answers from its exported fields.
	indexed      bool
	defaultIndex int
	classFailure []FailureMode // by class index
	readsAccount []bool        // by class index (ReadsAccount)
	byName       map[string]*Limit
	// sum is the SHA-256 of the file the policy was parsed from.
	sum [32]byte
}

// Identity is the `identity` section: how the reverse proxy finds who is calling.
type Identity struct {
	// TrustedProxies are the peers whose X-Forwarded-For is believed (bare
	// addresses become /32 or /128 prefixes; prefixes are masked).
	TrustedProxies []netip.Prefix
	// UserHeader carries the user id; "" means none is read.
	UserHeader string
	// UserSignatureHeader carries the user id's signature: hex
	// HMAC-SHA256(key, user id), or t=<unix>,v1=<hex HMAC-SHA256(key,
	// "<t>.<user id>")> (7.1); checked when UserSignatureKeyEnv is set.
	UserSignatureHeader string
	// UserSignatureKeyEnv names the environment variable holding the HMAC
	// key: the first of UserSignatureKeyEnvs.
	UserSignatureKeyEnv string
	// UserSignatureKeyEnvs name every variable holding a key that verifies
	// (`user_signature_key_env`, one name or a list: key rotation);
	// UserSignatureKeyEnvLine is the field's line in the file.
	UserSignatureKeyEnvs    []string
	UserSignatureKeyEnvLine int
	// UserSignatureMaxAge is how far a timestamped signature's t may be
	// from the limiter's clock, either way (default 5m).
	UserSignatureMaxAge time.Duration
	// UserSignatureRequireTimestamp refuses the bare form: a request with
	// one is unauthenticated.
	UserSignatureRequireTimestamp bool
	// IPv6Prefix is the prefix length an IPv6 client is keyed by in
	// limits and multipliers keyed by ip (`ipv6_prefix`, 7.1); 0 means
	// DefaultIPv6Prefix (64), 128 keeps whole addresses.
	IPv6Prefix int
	// DeviceHeader carries the device id; "" means none is read.
	DeviceHeader string
	// DeviceTokenHeader carries the device token of the device id (6.3;
	// default DefaultDeviceTokenHeader, X-Device-Token).
	DeviceTokenHeader string
	// AccountBodyField is the JSON body field holding the account on class
	// auth routes; "" means none is read. With several (the policy gives a
	// list: a login named by username or by email), it is the first.
	AccountBodyField string
	// AccountBodyFields are all the body fields that name the account, the
	// first being AccountBodyField (nil when none; a policy built by hand
	// may set AccountBodyField alone).
	AccountBodyFields []string
	// AccountHeader, when set, names a header carrying the account on
	// class auth routes (used when the body field is absent).
	AccountHeader string
	// AccountResponseHeader, when set, names the header of a 2xx answer
	// on a class auth route in which the upstream names the account that
	// logged in (proxy mode): the login_succeeded is reported for it, not
	// for the account the request named, and without it for none, so a
	// device enrols only in the account the upstream confirms. Without
	// it, a 2xx on an auth route that ignores the body's account (a
	// refresh-token grant) enrolled the caller's device in any account
	// (TestAttackRefreshGrantEnrolsDeviceInAnyAccount). The header is not
	// forwarded to the client.
	AccountResponseHeader string
	// Attributes fill the request's attributes from headers
	// (`identity.attributes`), sorted by attribute name.
	Attributes []AttributeHeader
}

// AccountFields returns the body fields that name the account: the
// policy's list, or AccountBodyField alone (a policy built by hand); nil
// when none is read.
func (id *Identity) AccountFields() []string {
	if len(id.AccountBodyFields) > 0 {
		return id.AccountBodyFields
	}
	if id.AccountBodyField != "" {
		return []string{id.AccountBodyField}
	}
	return nil
}

// AttributeHeader is one entry of `identity.attributes`: the attribute
// Name is read from the request header Header.
type AttributeHeader struct {
	Name, Header string
}

// AttrCondition is one entry of a limit's `if.attr`: the request's
// attribute Name must have one of Values.
type AttrCondition struct {
	Name   string
	Values []string
}

// Route is one entry of `routes`.
type Route struct {
	// Match is the route as written, its path folded: "METHOD /path-glob".
	Match string
	// Method is the method part ("*" matches any method).
	Method string
	// Pattern is the path glob, folded as FoldRoutePath folds request
	// paths ("/auth/login/" is "/auth/login"); `*` matches any run of
	// characters, `/` included.
	Pattern string
	// Class is the route's class name; ClassIndex its index in Policy.Classes.
	Class      string
	ClassIndex int
	// Line is the line of the route in the policy file.
	Line int
}

// Limit is one entry of `limits`.
type Limit struct {
	// Index is the limit's position in Policy.Limits (-1 for a limit of
	// no entry there: risk.attestation.max_per_ip's).
	Index int
	// Name is the limit's unique name.
	Name string
	// By lists the key parts, in file order.
	By []KeyPart
	// ByAttr, when By has a PartAttr, is parallel to By and holds each
	// PartAttr's attribute name ("" for the other parts); nil otherwise.
	ByAttr []string
	// Rate is N of `rate: N/period`: tokens refilled per Period.
	Rate float64
	// Period is the rate's period: 1s, 1m or 1h.
	Period time.Duration
	// RateText is `rate` as written in the file ("60/min").
	RateText string
	// Burst is the bucket capacity in tokens: `burst` as written, else Rate
	// (but at least 1, so that a bucket can always hold one request).
	Burst float64
	// Kind is what the limit counts: a token bucket (`rate`), a calendar
	// quota (`quota`: Burst per Calendar period, RateText as written) or
	// a concurrency limit (`concurrency`: Burst in flight, each holding
	// its slot for LeaseTTL at most).
	Kind     LimitKind
	Calendar Calendar
	LeaseTTL time.Duration
	// Shadow marks a limit that is evaluated and counted but never denies.
	Shadow bool
	// IfAuthenticated restricts the limit to (un)authenticated requests when non-nil.
	IfAuthenticated *bool
	// IfClasses restricts the limit to these classes when non-empty.
	IfClasses []string
	// IfAttr restricts the limit to requests whose attributes each match
	// (`if.attr`), when non-empty; sorted by attribute name.
	IfAttr []AttrCondition
	// FailureMode is the limit's own `failure_mode`, if it sets one.
	FailureMode *FailureMode
	// TrustedOwn is `trusted_devices: own` (7.1): a trusted device of the
	// request's account (a valid device token on a login_succeeded for it
	// within risk.attestation.trusted_for) takes from a bucket of its own,
	// the limit's key plus the device, with the limit's rate and burst;
	// every other request shares the limit's bucket. Default `shared`.
	TrustedOwn bool
	// LocalShare, when > 0 (`local_share: 5ms`), lets each limiter serve
	// the limit from tokens it takes from the store ahead of use, this
	// long's worth at the limit's rate (bucket.Shares): a key all traffic
	// shares (`by: [global]`, a route, a celebrity user) then costs the
	// store one decision per share instead of one per request. It never
	// admits more than the bucket; it may refuse early by what the
	// limiters hold (docs/policy.md). Rate limits only.
	LocalShare time.Duration
	// Line is the line of the limit in the policy file.
	Line int
}

// Risk is the `risk` section.
type Risk struct {
	// Velocity are the `velocity` rules, in file order.
	Velocity []VelocityRule
	// Anomaly, Reputation, Attestation and RepeatOffender are nil when their
	// section is absent.
	Anomaly        *Anomaly
	Reputation     *Reputation
	Attestation    *Attestation
	RepeatOffender *RepeatOffender
}

// VelocityRule is one entry of `risk.velocity`.
type VelocityRule struct {
	// Name is the rule's unique name.
	Name string
	// Event is the reported event type counted (any ValidEventType:
	// login_failed, otp_sent, ...).
	Event string
	// By is the subject counted: PartAccount, PartIP, PartUser, PartDevice,
	// PartASN, or PartAttr with the attribute's name in ByAttr.
	By     KeyPart
	ByAttr string
	// Classes are the route classes a lockout or step-up is enforced on
	// (empty: LockClass).
	Classes []string
	// Threshold is the count within Window at which the rule fires (>= 1).
	Threshold int
	// Window is the counting window.
	Window time.Duration
	// Action is lockout, step_up, tighten or block (tighten with
	// multiplier 0).
	Action string
	// Duration is how long the action lasts.
	Duration time.Duration
	// Multiplier applies to action tighten.
	Multiplier float64
	// Escalate is optional: each repeat within 24 h lasts Factor times longer, capped at Max.
	Escalate *Escalate
	// ExemptAttested spares a device that attested and logged in to the
	// account before.
	ExemptAttested bool
	// Shadow evaluates the rule without enforcing it: its alerts are
	// published with "shadow": true and counted, and no lock or multiplier
	// is set.
	Shadow bool
	// Line is the line of the rule in the policy file.
	Line int
}

// Escalate is a velocity rule's `escalate`.
type Escalate struct {
	// Factor (>= 1) multiplies the duration on each repeat.
	Factor float64
	// Max caps the escalated duration (>= the rule's Duration).
	Max time.Duration
}

// Anomaly is `risk.anomaly`.
type Anomaly struct {
	// By is the subject watched: PartDevice, PartIP, PartUser or PartAccount.
	By KeyPart
	// Factor (> 1): the rule fires when the short-window rate reaches Factor
	// times the baseline.
	Factor float64
	// ShortWindow is the recent window; LongWindow (longer) the baseline's.
	ShortWindow time.Duration
	LongWindow  time.Duration
	// MinBaseline is the baseline floor in events per second.
	MinBaseline float64
	// Multiplier in [0, 1] is applied to the subject for Duration.
	Multiplier float64
	Duration   time.Duration
	// Shadow evaluates the rule without enforcing it, as VelocityRule.Shadow.
	Shadow bool
}

// Reputation is `risk.reputation`.
type Reputation struct {
	// ASNDatabase is the path of the MaxMind ASN database, resolved against
	// the policy file's directory; "" when unset.
	ASNDatabase string
	// Rules are the `rules`, in file order.
	Rules []ReputationRule
}

// ReputationRule is one entry of `risk.reputation.rules`.
type ReputationRule struct {
	// ASNs and CIDRs select the requests the rule applies to; at least one
	// is set. CIDRs are masked; bare addresses are /32 or /128.
	ASNs  []uint32
	CIDRs []netip.Prefix
	// Multiplier (>= 0) applies to the request's ip subject (and to its asn
	// subject for ASN matches).
	Multiplier float64
	// Reason is shown with the multiplier (admin API, events).
	Reason string
	// Line is the line of the rule in the policy file.
	Line int
}

// Attestation is `risk.attestation`.
type Attestation struct {
	// VerifiedMultiplier (>= 1, default 1) applies to attested devices.
	VerifiedMultiplier float64
	// UnverifiedMultiplier in [0, 1] applies to every device without a
	// valid attestation, when UnverifiedSet; 0 when unset (no penalty).
	UnverifiedMultiplier float64
	UnverifiedSet        bool
	// ValidFor is how long an attestation counts (default 24h); device
	// tokens expire with it.
	ValidFor time.Duration
	// TrustedFor is how long a device that presented a valid device token
	// on a login_succeeded stays a trusted device of that account (7.1;
	// default 30 days): exempt_attested lockouts spare it and limits with
	// `trusted_devices: own` give it a bucket of its own.
	TrustedFor time.Duration
	// TokenKeyEnv names the environment variable holding the device-token
	// HMAC key (its raw bytes, at least 32); "" means a random key per
	// process (tokens verify only on the host that issued them).
	// TokenKeyEnvLine is its line in the policy file (0 when unset).
	TokenKeyEnv     string
	TokenKeyEnvLine int
	// MaxPerIP is `max_per_ip` (default DefaultAttestationMaxPerIP per
	// hour; nil when `off`): a built-in limit, named
	// AttestationLimitName and keyed by the ip part, that every
	// attestation (POST /v1/attest/apple and /v1/attest/android, the
	// requests that bind a device id to a new proof) takes a token from,
	// with the request's other limits; it is in no class's Applicable
	// list and its Index is -1. A genuine phone mints App Attest keys
	// and Play Integrity verdicts at will: without a bound per address
	// one phone attests device ids by the thousand, each with a fresh
	// verified budget.
	MaxPerIP *Limit
	// Apple and Android are nil when their platform is not configured.
	Apple   *AppleAttestation
	Android *AndroidAttestation
}

// AppleAttestation is `risk.attestation.apple`.
type AppleAttestation struct {
	// AppID is "TEAMID.bundle.id".
	AppID string
	// Environment is production (default) or development.
	Environment string
	// RootCAFile is the path of Apple's App Attestation root CA (PEM),
	// resolved against the policy file's directory; RootCAFileLine is
	// its line in the file, for errors found when it is read.
	RootCAFile     string
	RootCAFileLine int
}

// AndroidAttestation is `risk.attestation.android`.
type AndroidAttestation struct {
	// PackageName is the app's package name (com.example.app).
	PackageName string
	// DecryptionKeyEnv and VerificationKeyEnv name the environment
	// variables holding the Play Integrity keys; the Line fields are
	// their lines in the file, for errors found when they are read.
	DecryptionKeyEnv       string
	VerificationKeyEnv     string
	DecryptionKeyEnvLine   int
	VerificationKeyEnvLine int
	// MaxAge bounds the verdict's age (default 5m).
	MaxAge time.Duration
	// RequireStrongIntegrity demands MEETS_STRONG_INTEGRITY.
	RequireStrongIntegrity bool
}

// RepeatOffender is `risk.repeat_offender`.
type RepeatOffender struct {
	// PerMinute: a key denied more often than this in the last minute is a
	// repeat offender (default 100).
	PerMinute int
}
