// Package streams is Tollgate's NATS JetStream layer: the event schema
// (versioned JSON, see docs/events.md), the stream and consumer set-up, a
// publisher for the request path that never waits, and report and alert
// publishing with acknowledgement. Beside them: the hand-written encoder
// and decoders of decision batches (byte for byte encoding/json's,
// fuzzed against it), dialing with credentials (Auth, Dial), the
// embedded nats-server of the one-process default, and Trail, which reads
// the newest audit events and alerts back.
package streams

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

// SchemaVersion is the version of every event body ("v").
const SchemaVersion = 1

// DefaultPrefix is the default subject prefix ("tollgate.").
const DefaultPrefix = "tollgate."

// DefaultName is the default stream-name prefix ("TOLLGATE").
const DefaultName = "TOLLGATE"

// Decision is one limiter decision. Decisions are published in batches on
// <prefix>decisions.<class>.
type Decision struct {
	// TS is when the decision was made (RFC 3339, nanoseconds, UTC).
	TS time.Time `json:"ts"`
	// RequestID is the decision's request id.
	RequestID string `json:"request_id"`
	// Endpoint is "METHOD /path" as checked.
	Endpoint string `json:"endpoint"`
	// Class is the route class.
	Class string `json:"class"`
	// Route is the matched route's `match` ("" when none matched): the
	// value of the `route` key part.
	Route string `json:"route,omitempty"`
	// Limit is the binding limit ("" when none applied), or the velocity
	// rule of a lock.
	Limit string `json:"limit"`
	// Kind is the binding limit's kind: "bucket", "quota" or
	// "concurrency" (policy.LimitKind); omitted when Limit names no limit
	// (none applied, a list, a velocity rule's lock).
	Kind string `json:"kind,omitempty"`
	// Allowed is whether the request was admitted.
	Allowed bool `json:"allowed"`
	// Result is allowed, limited, locked, step_up, degraded, unavailable,
	// allowed_list or denied_list (Limit is then the list's name).
	Result string `json:"result"`
	// Remaining is the binding limit's whole tokens left.
	Remaining int64 `json:"remaining"`
	// Key parts of the request ("" when absent; always present, as the
	// contract lists them).
	IP       string `json:"ip"`
	ASN      string `json:"asn"`
	UserID   string `json:"user_id"`
	DeviceID string `json:"device_id"`
	Account  string `json:"account"`
	// DeviceVerified is true when the request presented a valid device
	// token for DeviceID (contract 6.3; omitted when false).
	DeviceVerified bool `json:"device_verified,omitempty"`
	// AttestationBudget marks the decision of an attestation's address
	// budget (risk.attestation.max_per_ip alone), taken once the
	// attestation verified and binds a new device id, after the
	// decision of the same request's route limits (the event before it,
	// same request_id); omitted when false. Replay decides it again as
	// such (engine.Input.AttestationBudget).
	AttestationBudget bool `json:"attestation_budget,omitempty"`
	// Attributes are the request's attributes (contract 6.9), omitted when
	// it has none.
	Attributes map[string]string `json:"attributes,omitempty"`
	// Cost is the tokens the request asked for. A decision recorded before
	// events carried it (no "cost" member) decodes as 1, the check API's
	// default.
	Cost float64 `json:"cost"`
	// LeaseID is the lease of the concurrency slots an admitted request
	// took (the check API's lease_id, contract 7.4), omitted when it took
	// none: a release (POST /v1/release) names the same id.
	LeaseID string `json:"lease_id,omitempty"`
}

// UnmarshalJSON decodes a decision as encoding/json would, except that a
// missing "cost" is 1 (decisions recorded before events carried a cost).
func (d *Decision) UnmarshalJSON(data []byte) error {
	type plain Decision
	p := plain{Cost: 1}
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	*d = Decision(p)
	return nil
}

// DecisionBatch is the body of a decisions message.
type DecisionBatch struct {
	// V is SchemaVersion.
	V int `json:"v"`
	// Decisions holds one or more decisions of one class, oldest first.
	Decisions []Decision `json:"decisions"`
}

// Report types.
const (
	ReportLoginFailed    = "login_failed"
	ReportLoginSucceeded = "login_succeeded"
	ReportStepUpPassed   = "step_up_passed"
)

// Report is an outcome the API knows and the limiter cannot see, published
// on <prefix>reports.<type>.
type Report struct {
	// V is SchemaVersion.
	V int `json:"v"`
	// ID is a ULID unique to the report (also the JetStream message id, so
	// a retried publish is stored once).
	ID string `json:"id"`
	// TS is when the limiter accepted the report.
	TS time.Time `json:"ts"`
	// Type is the event type: login_failed, login_succeeded and
	// step_up_passed mean what 2.x says; any other [a-z][a-z0-9_]{0,63}
	// (otp_sent, signup, ...) is counted by the velocity rules naming it (7.4).
	Type string `json:"type"`
	// Source is "api" (POST /v1/report) or "proxy" (an upstream answer).
	Source   string `json:"source"`
	Account  string `json:"account,omitempty"`
	IP       string `json:"ip,omitempty"`
	DeviceID string `json:"device_id,omitempty"`
	UserID   string `json:"user_id,omitempty"`
	// ASN is the AS number of IP (decimal) when the limiter's reputation
	// rules know it ("" otherwise): velocity rules keyed by asn count it.
	ASN string `json:"asn,omitempty"`
	// Attested is true when the report presented a valid device token for
	// DeviceID (contract 6.3): only then does a login_succeeded make the
	// device a trusted device of the account.
	Attested bool `json:"attested,omitempty"`
	// TokenExpires is the expiry of the device token that proved DeviceID
	// (set with Attested; omitted otherwise, and by limiters older than
	// it): riskd judges from it when the token was issued (TokenExpires
	// less attestation.valid_for), and enrols no device whose token was
	// issued at or before an admin's revocation of its trust (7.1).
	TokenExpires time.Time `json:"token_expires,omitzero"`
	// Attributes are the report's attributes (contract 6.9), omitted when
	// it has none.
	Attributes map[string]string `json:"attributes,omitempty"`
	// AllowList names the allow list the reported identity was on when
	// the limiter accepted the report ("" for none): the risk engine
	// ignores such reports, as the policy exempts the identity from
	// every signal.
	AllowList string `json:"allow_list,omitempty"`
}

// Alert kinds.
const (
	AlertAnomaly        = "anomaly"
	AlertLockout        = "lockout"
	AlertStepUp         = "step_up"
	AlertRepeatOffender = "repeat_offender"
	AlertTighten        = "tighten"
	// AlertBlock is the alert of a velocity rule with action block
	// (a tighten with multiplier 0, 7.4).
	AlertBlock = "block"
)

// Alert is published by riskd on <prefix>alerts.<kind>.
type Alert struct {
	// V is SchemaVersion.
	V int `json:"v"`
	// ID identifies the alert's episode; republishing the same episode
	// (after a riskd restart) is dropped by JetStream's duplicate window.
	ID string    `json:"alert_id"`
	TS time.Time `json:"ts"`
	// Kind is anomaly, lockout, step_up, repeat_offender or tighten.
	Kind string `json:"kind"`
	// Subject is ip, user, device, account or asn; SubjectID its id.
	Subject   string `json:"subject"`
	SubjectID string `json:"id"`
	// Rule is the velocity rule, "anomaly", or the limit of a repeat offender.
	Rule string `json:"rule"`
	// Multiplier applied (1 for lockouts and step-up, which apply no multiplier).
	Multiplier float64 `json:"multiplier"`
	// Rate is the observed rate in events per second; Baseline the
	// subject's baseline rate (anomaly) or the rule's threshold rate.
	Rate     float64 `json:"rate"`
	Baseline float64 `json:"baseline"`
	// ExpiresAt is when the measure ends.
	ExpiresAt time.Time `json:"expires_at"`
	// Reason explains the alert in words.
	Reason string `json:"reason"`
	// Count is the number of events that fired the rule.
	Count int `json:"count"`
	// Shadow is true for an alert of a rule with `shadow: true`: the rule
	// fired, and nothing was enforced.
	Shadow bool `json:"shadow,omitempty"`
}

// Audit actions (the last part of the subject <prefix>audit.<action>).
const (
	AuditMultiplierSet   = "multiplier_set"
	AuditMultiplierClear = "multiplier_clear"
	AuditLockoutLift     = "lockout_lift"
	// AuditAttestationForget: an operator freed a device id's
	// attestation (DELETE /v1/admin/attestations/{device_id}).
	AuditAttestationForget = "attestation_forget"
	// AuditTrustRevoke: an operator took a device (DeviceID; "" every
	// device) out of an account's trusted devices (DELETE
	// /v1/admin/trusted-devices/{account}[/{device_id}]).
	AuditTrustRevoke = "trust_revoke"
)

// Audit is one admin change, published by the limiter on
// <prefix>audit.<action> (contract 6.5) and kept in its own stream
// (AuditStream). riskd reads the whole audit stream: it keeps the record
// of admin multipliers (re-applied after Redis loses them) and learns of
// lifted lockouts (their velocity counts reset, the lock never re-asserted).
type Audit struct {
	// V is SchemaVersion.
	V int `json:"v"`
	// AuditID is a ULID unique to the change (also the JetStream message id).
	AuditID string `json:"audit_id"`
	// TS is when the limiter made the change.
	TS time.Time `json:"ts"`
	// Action is multiplier_set, multiplier_clear, lockout_lift,
	// attestation_forget or trust_revoke.
	Action string `json:"action"`
	// Subject is ip, user, device, account or asn; ID the subject's id
	// (lockout_lift: the locked subject, account, ip, user or device).
	Subject string `json:"subject"`
	ID      string `json:"id"`
	// Value is the multiplier set (multiplier_set; null otherwise).
	Value *float64 `json:"value"`
	// TTL is the multiplier's ttl as given ("" when none: it never expires),
	// ExpiresAt its end (null when none).
	TTL       string     `json:"ttl"`
	ExpiresAt *time.Time `json:"expires_at"`
	// Reason is the operator's reason ("" when none).
	Reason string `json:"reason"`
	// RequestID is the admin request's id; RemoteAddr its peer address.
	RequestID  string `json:"request_id"`
	RemoteAddr string `json:"remote_addr"`
	// ClientIP is the admin client's address as the proxy rules identify
	// it (identity.trusted_proxies: behind a trusted balancer, the
	// right-most X-Forwarded-For address that is not one; else the
	// peer's), so a change made through a balancer names who made it
	// ("" in events of earlier versions).
	ClientIP string `json:"client_ip,omitempty"`
	// Cleared reports, for lockout_lift, multiplier_clear,
	// attestation_forget and trust_revoke, whether something was in force.
	Cleared *bool `json:"cleared,omitempty"`
	// DeviceID is the device trust_revoke took out of the account's
	// trusted devices ("": all of them).
	DeviceID string `json:"device_id,omitempty"`
	// Untrusted is, for attestation_forget, how many accounts trusted the
	// freed device id (it is no longer trusted by any).
	Untrusted *int `json:"untrusted,omitempty"`
}

// TrustEnrolment is one trusted device of an account (7.1) as riskd
// journals it on <prefix>trust.<key> (TrustSubject) in TrustStream, which
// keeps the latest per account and device: a riskd that starts on a Redis
// that lost its trust sets, after the events stream dropped the logins
// that made them (48 h, where trust lasts trusted_for), reads them back.
// riskd journals an enrolment when it is new and when a login extends it
// by a day or more, so a journaled end may be up to a day short.
type TrustEnrolment struct {
	// V is SchemaVersion.
	V int `json:"v"`
	// Account trusts Device until Until; At is the time of the
	// login_succeeded that made (or last extended) it, which revocations
	// are judged against.
	Account string    `json:"account"`
	Device  string    `json:"device"`
	Until   time.Time `json:"until"`
	At      time.Time `json:"at"`
}

// TrustSubject is the subject of account's enrolment of device:
// prefix + "trust." + the first 32 hex digits of
// SHA-256(account "\x00" device), one token whatever the ids hold.
func TrustSubject(prefix, account, device string) string {
	h := sha256.New()
	h.Write([]byte(account))
	h.Write([]byte{0})
	h.Write([]byte(device))
	return prefix + "trust." + hex.EncodeToString(h.Sum(nil)[:16])
}
