package signals

import (
	"math"
	"strconv"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// Velocity constants.
const (
	// maxExact is the largest threshold counted with exact timestamps;
	// larger thresholds use velocitySlots time slots.
	maxExact = 64
	// velocitySlots is the number of slots of a slotted velocity window.
	velocitySlots = 64
	// escalateWindow is how far back firings count for escalation.
	escalateWindow = 24 * time.Hour
	// maxEscalations bounds the firings remembered for escalation.
	maxEscalations = 32
)

// Measure kinds of velocity actions.
const (
	actionLockout = "lockout"
	actionStepUp  = "step_up"
	actionTighten = "tighten"
	actionBlock   = "block" // tighten with multiplier 0 (7.4)
)

// velRule is a compiled velocity rule.
type velRule struct {
	policy.VelocityRule
	subject string // By as written: account, ip, user, device, asn, attr:NAME
	exact   bool   // Threshold <= maxExact: count timestamps
	slot    int64  // slotted: slot width, ns
	nslots  int    // slotted: number of slots
	escN    int    // firings to remember for escalation (0: none)
}

// velState is the counter of one (velocity rule, key).
type velState struct {
	rule *velRule
	// stamps holds (exact rules) the times of the newest Threshold counted
	// events, ascending, Unix ns.
	stamps []int64
	// ring counts (slotted rules) events in nslots slots.
	ring ring
	// last is the newest event time counted, Unix ns; touched the engine's
	// clock when the key was last seen.
	last, touched int64
	// until is when the measure this counter last set ends, Unix ns.
	until int64
	// lifted is when an admin last lifted the key's lock (Unix ns; 0:
	// never): events at or before it no longer count (6.5).
	lifted int64
	// fires holds the times of the newest firings, ascending, at most escN.
	fires []int64
}

// compileVelocity turns a policy rule into a velRule; ok is false for a rule
// policy.Parse would not produce (the engine ignores it).
func compileVelocity(r policy.VelocityRule) (*velRule, bool) {
	if r.Threshold < 1 || r.Window <= 0 || r.Duration <= 0 || !r.By.IsSubject() && (r.By != policy.PartAttr || r.ByAttr == "") {
		return nil, false
	}
	switch r.Action {
	case actionLockout, actionStepUp:
		if r.By == policy.PartASN || r.By == policy.PartAttr {
			return nil, false // 7.1: locks are on account, ip, user or device
		}
	case actionTighten:
	case actionBlock:
		r.Multiplier = 0
	default:
		return nil, false
	}
	v := &velRule{VelocityRule: r, subject: r.Subject(), exact: r.Threshold <= maxExact}
	if !v.exact {
		v.slot = max(1, int64((r.Window+velocitySlots-1)/velocitySlots))
		v.nslots = int((int64(r.Window) + v.slot - 1) / v.slot)
	}
	if esc := r.Escalate; esc != nil && esc.Factor > 1 && esc.Max > r.Duration {
		d := float64(r.Duration)
		for d < float64(esc.Max) && v.escN < maxEscalations {
			d *= esc.Factor
			v.escN++
		}
	}
	return v, true
}

// sameCounter reports whether a and b count alike (same geometry).
func (a *velRule) sameCounter(b *velRule) bool {
	if a.exact != b.exact {
		return false
	}
	if a.exact {
		return a.Threshold == b.Threshold
	}
	return a.slot == b.slot && a.nslots == b.nslots
}

// configureVelocity installs the velocity rules, keeping the counters of
// rules with an unchanged name, event and by.
func (e *Engine) configureVelocity(rules []policy.VelocityRule) {
	e.vrules = e.vrules[:0:0]
	byName := make(map[string]*velRule, len(rules))
	for _, r := range rules {
		if v, ok := compileVelocity(r); ok {
			e.vrules = append(e.vrules, v)
			byName[v.Name] = v
		}
	}
	e.vel.each(func(en *entry[velState]) {
		st := &en.val
		old := st.rule
		nr := byName[old.Name]
		if nr == nil || nr.subject != old.subject || nr.Event != old.Event {
			e.vel.remove(en)
			return
		}
		switch {
		case nr.exact && old.exact:
			if n := len(st.stamps); n > nr.Threshold {
				st.stamps = st.stamps[n-nr.Threshold:]
			}
		case !nr.sameCounter(old):
			st.stamps = st.stamps[:0]
			if nr.exact {
				st.ring = ring{}
			} else {
				st.ring.init(nr.nslots)
			}
		}
		if n := len(st.fires); n > nr.escN {
			st.fires = st.fires[n-nr.escN:]
		}
		st.rule = nr
	})
	e.vel.setMax(e.maxKeys)
}

// reportValue returns the report's value of a velocity rule's by.
func reportValue(r *streams.Report, rule *velRule) string {
	switch rule.By {
	case policy.PartAttr:
		return r.Attributes[rule.ByAttr]
	case policy.PartASN:
		return r.ASN
	case policy.PartAccount:
		return r.Account
	case policy.PartIP:
		return r.IP
	case policy.PartUser:
		return r.UserID
	case policy.PartDevice:
		return r.DeviceID
	}
	return ""
}

// velocityReport counts r for every velocity rule of its type and fires
// those that reach their threshold. Callers hold e.mu.
func (e *Engine) velocityReport(r *streams.Report, ns int64, out []Action) []Action {
	for _, rule := range e.vrules {
		if rule.Event != r.Type || r.AllowList != "" && !rule.IsLock() {
			continue // an allow list exempts from every signal but locks (7.1)
		}
		value := reportValue(r, rule)
		if value == "" {
			continue
		}
		if rule.By == policy.PartIP {
			value = e.ipKey(value) // an IPv6 client's prefix (7.1)
		}
		subject, key := rule.subject, value
		if rule.By == policy.PartDevice && !r.Attested {
			subject, key = ClaimSubject, claimKey(value) // claims count apart (7.1)
		}
		st := e.velocity(rule, key)
		if ns <= st.lifted {
			continue // counted before an admin lift: forgiven
		}
		count, ok := st.count(ns)
		if !ok || count < rule.Threshold || st.until > ns {
			continue
		}
		out = e.fireVelocity(rule, subject, st, value, e.at, ns, count, out)
	}
	return out
}

// velocity returns the state of rule for value, created fresh when it is
// not held, and marks it touched at the engine's clock (the LRU bound
// evicts the least recently touched). Callers hold e.mu.
func (e *Engine) velocity(rule *velRule, value string) *velState {
	e.buf = append(append(append(e.buf[:0], rule.Name...), 0), value...)
	en := e.vel.getBytes(e.buf)
	if en == nil {
		en = e.vel.addBytes(e.buf)
		en.val.reset(rule)
	}
	st := &en.val
	st.touched = e.clock
	return st
}

// worth weighs st for the LRU bound at clock (Unix ns): the events it
// counts (in its window or not yet swept), or the most when a measure it
// set is in force. A full table evicts, of its least recent counters, the
// one worth least.
func (st *velState) worth(clock int64) uint64 {
	if st.until > clock {
		return math.MaxUint64
	}
	return uint64(len(st.stamps)) + st.ring.sum
}

// reset re-initialises st for rule, keeping its buffers.
func (st *velState) reset(rule *velRule) {
	st.rule = rule
	st.stamps = st.stamps[:0]
	if rule.exact {
		st.ring.reset()
	} else {
		st.ring.init(rule.nslots)
	}
	st.fires = st.fires[:0]
	st.last, st.touched, st.until, st.lifted = 0, 0, 0, 0
}

// count adds an event at ns and returns the count in the window ending at
// the newest event counted; ok is false when the event was too old to count.
func (st *velState) count(ns int64) (n int, ok bool) {
	rule := st.rule
	if ns > st.last {
		st.last = ns
	}
	if !rule.exact {
		if !st.ring.add(floorDiv(ns, rule.slot)) {
			return 0, false
		}
		return int(min(st.ring.sum, math.MaxInt32)), true
	}
	s := st.stamps
	if len(s) == rule.Threshold {
		if ns <= s[0] {
			return 0, false // older than every event kept: changes nothing
		}
		copy(s, s[1:])
		s = s[:len(s)-1]
	}
	if len(s) == cap(s) {
		// Grow once to the threshold: most keys of a rotation see one event.
		c := 2
		if len(s) >= 2 {
			c = rule.Threshold
		}
		s = append(make([]int64, 0, min(c, rule.Threshold)), s...)
	}
	i := len(s)
	for i > 0 && s[i-1] > ns {
		i--
	}
	s = append(s, 0)
	copy(s[i+1:], s[i:])
	s[i] = ns
	st.stamps = s
	from := s[len(s)-1] - int64(rule.Window)
	j := 0
	for j < len(s) && s[j] <= from {
		j++
	}
	return len(s) - j, true
}

// idle reports whether st holds nothing that matters any more: unseen for
// a whole window of the engine's clock, and, on the key's own time, no
// measure in force and no firing within 24 h.
func (st *velState) idle(clock int64) bool {
	elapsed := clock - st.touched
	if elapsed < int64(st.rule.Window) {
		return false
	}
	now := st.last + elapsed
	if st.until > now {
		return false
	}
	n := len(st.fires)
	return n == 0 || st.fires[n-1] <= now-int64(escalateWindow)
}

// escalated returns the measure's duration for a firing at ns: Duration
// times Factor^n, capped at Max, n the firings within the 24 h before ns
// (rule.Escalate set), else Duration. The firing is recorded.
func (st *velState) escalated(ns int64) (time.Duration, int) {
	rule := st.rule
	if rule.escN == 0 {
		return rule.Duration, 0
	}
	n := 0
	for _, f := range st.fires {
		if f <= ns && ns-f < int64(escalateWindow) {
			n++
		}
	}
	d := rule.Duration
	if n > 0 {
		x := float64(rule.Duration) * math.Pow(rule.Escalate.Factor, float64(n))
		if x >= float64(rule.Escalate.Max) {
			d = rule.Escalate.Max
		} else {
			d = time.Duration(x)
		}
	}
	if len(st.fires) == rule.escN {
		copy(st.fires, st.fires[1:])
		st.fires = st.fires[:len(st.fires)-1]
	}
	if cap(st.fires) < rule.escN {
		st.fires = append(make([]int64, 0, rule.escN), st.fires...)
	}
	i := len(st.fires)
	for i > 0 && st.fires[i-1] > ns {
		i--
	}
	st.fires = append(st.fires, 0)
	copy(st.fires[i+1:], st.fires[i:])
	st.fires[i] = ns
	return d, n
}

// fireVelocity applies rule's action on (rule.By, value) at ts: it records
// the measure, clears the window and appends the actions. A shadow rule
// clears its window and keeps quiet for the measure's duration like any
// other, but appends only its alert (marked shadow) and records no measure.
func (e *Engine) fireVelocity(rule *velRule, subject string, st *velState, value string, ts time.Time, ns int64, count int, out []Action) []Action {
	d, repeats := st.escalated(ns)
	until := ts.Add(d)
	st.until = until.UnixNano()
	st.stamps = st.stamps[:0]
	if !rule.exact {
		st.ring.reset()
	}
	window := fmtDuration(rule.Window)
	summary := strconv.Itoa(count) + " " + rule.Event + " in " + window
	kind, what, multiplier, out := e.enforceVelocity(rule, subject, value, ns, until, summary, out)
	reason := subject + " " + value + ": " + summary + " (threshold " + strconv.Itoa(rule.Threshold) +
		", rule " + rule.Name + "); " + what + " for " + fmtDuration(d)
	if repeats > 0 {
		reason += " (escalated: " + ordinal(repeats+1) + " firing within 24h)"
	}
	if rule.Shadow {
		reason += "; shadow rule: not enforced"
	}
	secs := rule.Window.Seconds()
	a := streams.Alert{
		V:          streams.SchemaVersion,
		ID:         alertID(kind, rule.Name, subject, value, ts),
		TS:         ts,
		Kind:       kind,
		Subject:    subject,
		SubjectID:  value,
		Rule:       rule.Name,
		Multiplier: multiplier,
		Rate:       float64(count) / secs,
		Baseline:   float64(rule.Threshold) / secs,
		ExpiresAt:  until,
		Reason:     reason,
		Count:      count,
		Shadow:     rule.Shadow,
	}
	return append(out, Action{Kind: Alert, Subject: subject, ID: value, Alert: a})
}

// enforceVelocity applies rule's action to the subject until until (a
// lock or a multiplier, nothing for a shadow rule), appending the action
// to out, and returns the alert's kind, what was done in words and the
// multiplier set (1 for a lock).
func (e *Engine) enforceVelocity(rule *velRule, subject, value string, ns int64, until time.Time, summary string, out []Action) (kind, what string, multiplier float64, _ []Action) {
	multiplier = 1
	switch rule.Action {
	case actionLockout, actionStepUp:
		kind, what = streams.AlertLockout, "locked out"
		if rule.Action == actionStepUp {
			kind, what = streams.AlertStepUp, "step-up required"
		}
		lock := bucket.Lock{Kind: rule.Action, Rule: rule.Name, Until: until, Own: rule.OwnLock()}
		if !rule.Shadow && e.setLock(ns, subject, value, lock, rule.Name) {
			out = append(out, Action{Kind: SetLock, Subject: subject, ID: value, Lock: lock})
		}
	case actionTighten, actionBlock:
		kind, what = streams.AlertTighten, "limits tightened to x"+fmtFloat(rule.Multiplier)
		multiplier = rule.Multiplier
		if rule.Action == actionBlock {
			kind, what = streams.AlertBlock, "blocked"
		}
		m := bucket.Multiplier{Source: "velocity", Value: rule.Multiplier, ExpiresAt: until,
			Reason: rule.Name + ": " + summary}
		if !rule.Shadow && e.setMultiplier(ns, subject, value, m, rule.Name) {
			out = append(out, Action{Kind: SetMultiplier, Subject: subject, ID: value, Multiplier: m})
		}
	}
	return kind, what, multiplier, out
}

// stepUpPassed lifts the step-up requirements in force on the report's
// account that the engine set: the one at the account's lock key and
// each one a class-restricted rule keeps under its own key. Callers hold
// e.mu.
func (e *Engine) stepUpPassed(r *streams.Report, ns int64, out []Action) []Action {
	out = e.stepUpPassedAt(r, ns, bucket.Lock{}, out)
	for _, rule := range e.vrules {
		if rule.subject == "account" && rule.Action == actionStepUp && rule.OwnLock() {
			out = e.stepUpPassedAt(r, ns, bucket.Lock{Rule: rule.Name, Own: true}, out)
		}
	}
	return out
}

// stepUpPassedAt lifts the step-up at the lock key of at (at.Own and
// at.Rule name it) on the report's account, if the engine set one there.
// Callers hold e.mu.
func (e *Engine) stepUpPassedAt(r *streams.Report, ns int64, at bucket.Lock, out []Action) []Action {
	key := e.lockMeasureKey("account", r.Account, at)
	en := e.meas.peekBytes(key)
	if en == nil || en.val.end <= ns || en.val.act.Lock.Kind != actionStepUp {
		return out
	}
	rule := en.val.rule
	e.meas.remove(en)
	e.buf = append(append(append(e.buf[:0], rule...), 0), r.Account...)
	if ven := e.vel.peekBytes(e.buf); ven != nil && ven.val.until > ns {
		ven.val.until = ns
	}
	return append(out, Action{Kind: ClearLock, Subject: "account", ID: r.Account, Lock: bucket.Lock{Rule: at.Rule, Own: at.Own}})
}

// LiftLock is LiftSubjectLock of the account subject.
func (e *Engine) LiftLock(account string, ts time.Time) bool {
	return e.LiftSubjectLock("account", account, ts)
}

// LiftSubjectLock records that an admin lifted the lock of (subject, id)
// at ts (an audit lockout_lift event, 6.5, 7.1): the velocity counts of
// every rule keyed by that subject kind are reset to the events after ts
// (the subject is locked again only by the threshold of new events), and
// the lock the engine set before ts is forgotten, so it is never
// re-asserted (Active no longer lists it). It reports whether the engine
// had such a lock in force. Events that arrive later with a time at or
// before ts are not counted. The lift of a device lifts its claim too
// (the token-less reports of its id, counted apart: the limiter answers
// both with scope "device"); a claim's lift is the claim's alone. The
// lift of an ip that is an IPv6 address lifts its prefix (ipKey: the id
// rules by ip count and lock it under), as does the prefix's own id.
func (e *Engine) LiftSubjectLock(subject, id string, ts time.Time) bool {
	ns, ok := eventTime(ts)
	if id == "" || subject == "" || !ok {
		return false
	}
	e.lock()
	defer e.unlock()
	e.advanceClock(ns)
	if subject == "ip" {
		id = e.ipKey(id)
	}
	lifted := e.liftLocked(subject, id, ns)
	if subject == "device" {
		lifted = e.liftLocked(ClaimSubject, id, ns) || lifted
	}
	return lifted
}

// liftLocked is LiftSubjectLock's work for one subject kind: an admin
// lift ends every lock of the subject, the one at its lock key and each
// a class-restricted rule keeps under its own key. Callers hold e.mu.
func (e *Engine) liftLocked(subject, id string, ns int64) bool {
	base := e.meas.peekBytes(e.lockMeasureKey(subject, id, bucket.Lock{}))
	lifted := make([]*entry[measure], 0, 2)
	if base != nil && base.val.set <= ns {
		lifted = append(lifted, base)
	}
	for _, rule := range e.vrules {
		vkey := id
		switch {
		case rule.subject == subject:
		case subject == ClaimSubject && rule.By == policy.PartDevice:
			vkey = claimKey(id) // claims count apart (velocityReport)
		default:
			continue
		}
		// the lock lifted: the one set at or before ts at the rule's lock
		// key (not one that new events set after it, as when an old lift
		// is replayed at start)
		men := base
		if rule.OwnLock() {
			men = e.meas.peekBytes(e.lockMeasureKey(subject, id, bucket.Lock{Rule: rule.Name, Own: true}))
			if men != nil && men.val.set <= ns {
				lifted = append(lifted, men)
			}
		}
		lifts := men != nil && men.val.set <= ns
		st := e.velocity(rule, vkey)
		if ns > st.lifted {
			st.lifted = ns
		}
		if st.until > ns && (lifts || men == nil && st.last <= ns) {
			st.until = ns
		}
		if rule.exact {
			j := 0
			for j < len(st.stamps) && st.stamps[j] <= ns {
				j++
			}
			st.stamps = append(st.stamps[:0], st.stamps[j:]...)
		} else {
			// slot counts cannot be split at ts: every slot up to the
			// lift's goes (all of them when nothing came after it, as
			// live), so a lift read after the reports that followed it
			// (riskd's restart replays reports first) forgets the reports
			// before it too, and those of its own slot after it
			st.ring.clearTo(floorDiv(ns, rule.slot))
		}
	}
	inForce := false
	for _, men := range lifted {
		inForce = inForce || men.val.end > ns
		e.meas.remove(men)
	}
	return inForce
}
