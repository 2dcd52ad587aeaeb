// Package streams is Tollgate's NATS JetStream layer: the event schema
// (versioned JSON, see docs/events.md), the stream and consumer set-up, a
// publisher for the request path that never waits, and report and alert
// publishing with acknowledgement.
package streams

import "time"

// SchemaVersion is the version of every event body ("v").
const SchemaVersion = 1

// DefaultPrefix is the default subject prefix ("tollgate.").
const DefaultPrefix = "tollgate."

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
	// Attributes are the request's attributes (contract 6.9), omitted when
	// it has none.
	Attributes map[string]string `json:"attributes,omitempty"`
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
	// Type is login_failed, login_succeeded or step_up_passed.
	Type string `json:"type"`
	// Source is "api" (POST /v1/report) or "proxy" (an upstream answer).
	Source   string `json:"source"`
	Account  string `json:"account,omitempty"`
	IP       string `json:"ip,omitempty"`
	DeviceID string `json:"device_id,omitempty"`
	UserID   string `json:"user_id,omitempty"`
	// Attested is true when the device had a valid attestation at the time.
	Attested bool `json:"attested,omitempty"`
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
}
