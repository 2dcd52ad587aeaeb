package signals

import (
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/streams"
)

// ActionKind is what an Action asks riskd to do.
type ActionKind uint8

// Action kinds.
const (
	// SetLock sets Lock on the subject's lock key (lockout or step-up),
	// or on its rule's own key when Lock.Own (a class-restricted rule).
	SetLock ActionKind = iota + 1
	// ClearLock removes the subject's lock at the key Lock names (a
	// step_up_passed report): its rule's own key when Lock.Own, else the
	// subject's lock key.
	ClearLock
	// SetMultiplier sets Multiplier on the subject's multiplier hash.
	SetMultiplier
	// Alert publishes Alert on <prefix>alerts.<kind>.
	Alert
)

// Action is one effect of an event. Subject is ip, user, device, account
// or asn; ID the subject's id.
type Action struct {
	Kind       ActionKind
	Subject    string
	ID         string
	Lock       bucket.Lock       // SetLock; ClearLock: Rule and Own name the key
	Multiplier bucket.Multiplier // SetMultiplier
	Alert      streams.Alert     // Alert
}

// Offender is a key denied more than repeat_offender.per_minute times in
// the last minute.
type Offender struct {
	// Limit is the limit that denied.
	Limit string `json:"limit"`
	// Key is the limit's key: its by-parts' values joined with "|"
	// (e.g. "198.51.100.7|POST /auth/login").
	Key string `json:"key"`
	// Count is the denials in the last minute.
	Count int `json:"count"`
	// Since is when the episode started.
	Since time.Time `json:"since"`
}
