package replay

import (
	"time"

	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/streams"
)

// Which policy a count is about: index into the replayer's two sims.
const (
	base = 0
	cand = 1
)

// Row flags of one decision.
const (
	appliedBase uint8 = 1 << iota
	appliedCand
	deniedBase
	deniedCand
)

// Row counts decisions of one route class, under one limit (or velocity
// rule, for lockouts and step-ups; "list:NAME" for an allow or deny
// list's answers), or of the whole class when Limit is "".
type Row struct {
	// Class is the route class; Limit the limit or velocity rule ("" in
	// class totals).
	Class string `json:"class"`
	Limit string `json:"limit,omitempty"`
	// Kind is what the row counts ("" in class totals): a limit's kind
	// (bucket, quota, concurrency), a velocity rule's action (lockout,
	// step_up) or list.
	Kind string `json:"kind,omitempty"`
	// Requests is the decisions the limit applied to under either policy
	// (class totals: the decisions of the class under either).
	Requests int64 `json:"requests"`
	// DeniedBaseline and DeniedCandidate are the decisions it denied under
	// each policy; a request denied by several limits counts for each.
	DeniedBaseline  int64 `json:"denied_baseline"`
	DeniedCandidate int64 `json:"denied_candidate"`
	// NewlyDenied: allowed under the baseline, denied by this limit under
	// the candidate. NewlyAllowed: denied by it under the baseline,
	// allowed under the candidate.
	NewlyDenied  int64 `json:"newly_denied"`
	NewlyAllowed int64 `json:"newly_allowed"`

	stamp int64 // the decision that last touched the row
	flags uint8 // that decision's flags
}

// public returns r without its scratch fields.
func (r *Row) public() Row {
	c := *r
	c.stamp, c.flags = 0, 0
	return c
}

// Identity counts the denials of one subject (ip, user, device,
// account): only decisions denied under either policy are tallied per
// identity, so that the common case, allowed under both, costs nothing.
type Identity struct {
	Subject         string `json:"subject"`
	ID              string `json:"id"`
	DeniedBaseline  int64  `json:"denied_baseline"`
	DeniedCandidate int64  `json:"denied_candidate"`
	NewlyDenied     int64  `json:"newly_denied"`
	NewlyAllowed    int64  `json:"newly_allowed"`
	// LoggedIn: the record holds a login_succeeded report of this subject.
	// ValidDeviceToken: a report or decision of this subject carried a
	// valid device token (attested).
	LoggedIn         bool `json:"logged_in"`
	ValidDeviceToken bool `json:"valid_device_token"`
}

// Measure counts the alerts of one risk rule under each policy: the
// lockouts, step-ups, tightenings and anomaly throttles it would have set
// (or, Shadow, the firings of a shadow rule, which set nothing).
type Measure struct {
	Rule      string `json:"rule"`
	Kind      string `json:"kind"`
	Shadow    bool   `json:"shadow"`
	Baseline  int64  `json:"baseline"`
	Candidate int64  `json:"candidate"`
	// Named names the first MaxNamed lockouts, step-ups, tightenings and
	// blocks the candidate's rule set (of Candidate in all), in event-time
	// order: who, when and until when. Omitted for other kinds.
	Named []Named `json:"named,omitempty"`
}

// MaxNamed bounds Measure.Named: a flood that fires a rule for millions of
// subjects keeps the report (and the replay's memory) small; Candidate
// still counts every firing.
const MaxNamed = 20

// Named is one measure a candidate rule would have set: on which subject,
// from when (the event time of the event that fired it) until when.
type Named struct {
	Subject string    `json:"subject"`
	ID      string    `json:"id"`
	At      time.Time `json:"at"`
	Until   time.Time `json:"until"`
}

// namedKinds are the alert kinds whose subjects a report names.
var namedKinds = map[string]bool{
	streams.AlertLockout: true, streams.AlertStepUp: true, streams.AlertTighten: true, streams.AlertBlock: true,
}

// Subject kinds of identities, in report order.
const (
	subjIP uint8 = iota
	subjUser
	subjDevice
	subjAccount
)

var subjectNames = [...]string{subjIP: "ip", subjUser: "user", subjDevice: "device", subjAccount: "account"}

type rowKey struct{ class, limit, kind string }

type measureKey struct {
	rule, kind string
	shadow     bool
}

// Good-identity flags.
const (
	goodLogin uint8 = 1 << iota
	goodToken
)

// tally accumulates the report. Its state is bounded: at most maxIDs
// identities and maxIDs good identities are tracked; the rest are counted
// as untracked.
type tally struct {
	n       int64 // decisions tallied (row stamps)
	total   Row
	classes map[string]*Row
	rows    map[rowKey]*Row
	byLimit [2]map[string][]*Row // per policy: class -> rows by limit index
	touched []*Row
	// ids and good are by subject kind, then id; nIDs and nGood count
	// their entries.
	ids         [len(subjectNames)]map[string]*Identity
	good        [len(subjectNames)]map[string]uint8
	nIDs, nGood int
	maxIDs      int
	measures    map[measureKey]*Measure

	decisions, reports, skipped int64
	admin                       int64 // admin changes applied (Replayer.Audit)
	seeded                      int64 // trusted devices read from the journal (seedTrust)
	untrackedIDs, untrackedGood int64
}

func newTally(maxIDs int) *tally {
	t := &tally{
		total:   Row{Class: "all"},
		classes: map[string]*Row{}, rows: map[rowKey]*Row{},
		byLimit:  [2]map[string][]*Row{{}, {}},
		maxIDs:   maxIDs,
		measures: map[measureKey]*Measure{},
	}
	for k := range t.ids {
		t.ids[k], t.good[k] = map[string]*Identity{}, map[string]uint8{}
	}
	return t
}

// denied reports whether an outcome refused the request.
func denied(o engine.Outcome) bool {
	switch o {
	case engine.Allowed, engine.Degraded, engine.AllowedList:
		return false
	}
	return true
}

// measure counts alert a under policy which, and names the candidate's
// first MaxNamed measures of each rule and kind.
func (t *tally) measure(which int, a *streams.Alert) {
	k := measureKey{a.Rule, a.Kind, a.Shadow}
	m := t.measures[k]
	if m == nil {
		m = &Measure{Rule: a.Rule, Kind: a.Kind, Shadow: a.Shadow}
		t.measures[k] = m
	}
	if which == base {
		m.Baseline++
		return
	}
	m.Candidate++
	if namedKinds[a.Kind] && len(m.Named) < MaxNamed {
		m.Named = append(m.Named, Named{Subject: a.Subject, ID: a.SubjectID, At: a.TS.UTC(), Until: a.ExpiresAt.UTC()})
	}
}

// decision tallies one decision re-run under both policies.
func (t *tally) decision(rec *streams.Decision, sims *[2]*sim) {
	t.n++
	t.decisions++
	t.touched = t.touched[:0]
	for which, s := range sims {
		t.mark(which, s)
	}
	bd, cd := denied(sims[base].d.Outcome), denied(sims[cand].d.Outcome)
	t.total.flags = 0
	if bd {
		t.total.flags |= deniedBase
	}
	if cd {
		t.total.flags |= deniedCand
	}
	t.touched = append(t.touched, &t.total)
	for _, r := range t.touched {
		r.Requests++
		f := r.flags
		if f&deniedBase != 0 {
			r.DeniedBaseline++
			if !cd {
				r.NewlyAllowed++
			}
		}
		if f&deniedCand != 0 {
			r.DeniedCandidate++
			if !bd {
				r.NewlyDenied++
			}
		}
	}
	if bd || cd {
		t.identity(subjIP, rec.IP, bd, cd)
		t.identity(subjUser, rec.UserID, bd, cd)
		t.identity(subjDevice, rec.DeviceID, bd, cd)
		t.identity(subjAccount, rec.Account, bd, cd)
	}
	if rec.DeviceVerified {
		t.markGood(subjDevice, rec.DeviceID, goodToken)
		t.markGood(subjUser, rec.UserID, goodToken)
		t.markGood(subjAccount, rec.Account, goodToken)
	}
}

// mark flags the rows sim s's decision touches.
func (t *tally) mark(which int, s *sim) {
	d := &s.d
	applied, deny := appliedBase, deniedBase
	if which == cand {
		applied, deny = appliedCand, deniedCand
	}
	dn := denied(d.Outcome)
	t.touch(t.classRow(d.Class), applied, deny, dn)
	switch d.Outcome {
	case engine.Locked, engine.StepUp:
		t.touch(t.row(d.Class, d.Lock.Rule, d.Lock.Kind), applied, deny, true)
		return
	case engine.AllowedList, engine.DeniedList:
		t.touch(t.row(d.Class, "list:"+d.List.Name, "list"), applied, deny, dn)
		return
	}
	rows := t.byLimit[which][d.Class]
	if rows == nil {
		rows = make([]*Row, len(s.pol.Limits))
		t.byLimit[which][d.Class] = rows
	}
	for i, l := range d.Applied() {
		var r *Row
		if l.Index >= 0 { // risk.attestation.max_per_ip's limit has none
			r = rows[l.Index]
		}
		if r == nil {
			r = t.row(d.Class, l.Name, l.Kind.String())
			if l.Index >= 0 {
				rows[l.Index] = r
			}
		}
		t.touch(r, applied, deny, d.Outcome == engine.Limited && !l.Shadow && !d.LimitResult(i).Allowed)
	}
}

// touch sets the flags of r for this decision.
func (t *tally) touch(r *Row, applied, deny uint8, isDenied bool) {
	if r.stamp != t.n {
		r.stamp, r.flags = t.n, 0
		t.touched = append(t.touched, r)
	}
	r.flags |= applied
	if isDenied {
		r.flags |= deny
	}
}

func (t *tally) classRow(class string) *Row {
	r := t.classes[class]
	if r == nil {
		r = &Row{Class: class}
		t.classes[class] = r
	}
	return r
}

func (t *tally) row(class, limit, kind string) *Row {
	k := rowKey{class, limit, kind}
	r := t.rows[k]
	if r == nil {
		r = &Row{Class: class, Limit: limit, Kind: kind}
		t.rows[k] = r
	}
	return r
}

// identity counts a denied decision for (kind, id).
func (t *tally) identity(kind uint8, id string, bd, cd bool) {
	if id == "" {
		return
	}
	x := t.ids[kind][id]
	if x == nil {
		if t.nIDs >= t.maxIDs {
			t.untrackedIDs++
			return
		}
		x = &Identity{Subject: subjectNames[kind], ID: id}
		t.ids[kind][id] = x
		t.nIDs++
	}
	if bd {
		x.DeniedBaseline++
	}
	if cd {
		x.DeniedCandidate++
	}
	switch {
	case cd && !bd:
		x.NewlyDenied++
	case bd && !cd:
		x.NewlyAllowed++
	}
}

// report tallies a recorded report: who logged in, who held a valid device token.
func (t *tally) report(r *streams.Report) {
	t.reports++
	var flag uint8
	if r.Type == streams.ReportLoginSucceeded {
		flag |= goodLogin
	}
	if r.Attested {
		flag |= goodToken
	}
	if flag == 0 {
		return
	}
	t.markGood(subjIP, r.IP, flag&goodLogin)
	t.markGood(subjUser, r.UserID, flag)
	t.markGood(subjDevice, r.DeviceID, flag)
	t.markGood(subjAccount, r.Account, flag)
}

func (t *tally) markGood(kind uint8, id string, flag uint8) {
	if id == "" || flag == 0 {
		return
	}
	old, ok := t.good[kind][id]
	if !ok {
		if t.nGood >= t.maxIDs {
			t.untrackedGood++
			return
		}
		t.nGood++
	}
	t.good[kind][id] = old | flag
}
