package signals

import (
	"strconv"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// Anomaly ring geometry.
const (
	// maxFineSlots bounds the slots of the short window (1 s each up to a
	// 64 s window, wider beyond).
	maxFineSlots = 64
	// coarseSlots is the number of slots the long window is cut into.
	coarseSlots = 60
	// anomalyRuleName is the Rule of anomaly alerts and measures.
	anomalyRuleName = "anomaly"
	// rateSlack absorbs floating-point error when comparing rates, so that
	// exactly factor x baseline fires.
	rateSlack = 1e-9
)

// anomalyRule is the compiled `risk.anomaly`.
type anomalyRule struct {
	policy.Anomaly
	subject string
	// fine is the short window's slot width and nFine its number of slots;
	// coarse and nCoarse the same for the long window (ns).
	fine, coarse   int64
	nFine, nCoarse int
	// shortSec is the effective short window, nFine*fine, in seconds.
	shortSec float64
}

// anomalyState is the rings of one key.
type anomalyState struct {
	slots        []uint32 // backing array of both rings
	fine, coarse ring
	last         int64 // newest event time, Unix ns
	touched      int64 // the engine's clock when the key was last seen
	until        int64 // the anomaly measure in force ends, Unix ns
}

// compileAnomaly returns the rule's geometry, or nil for a section
// policy.Parse would not produce.
func compileAnomaly(a *policy.Anomaly) *anomalyRule {
	if a == nil || a.ShortWindow <= 0 || a.LongWindow <= a.ShortWindow || a.Factor <= 0 ||
		a.Duration <= 0 || !a.By.IsSubject() {
		return nil
	}
	short, long := int64(a.ShortWindow), int64(a.LongWindow)
	sec := int64(time.Second)
	fine := min(sec, short)
	if short > maxFineSlots*sec {
		fine = ceilDiv(ceilDiv(short, maxFineSlots), sec) * sec
	}
	nFine := ceilDiv(short, fine)
	coarse := max(fine, ceilDiv(ceilDiv(long, coarseSlots), fine)*fine)
	nCoarse := max(ceilDiv(long, coarse), ceilDiv(nFine*fine, coarse)+1)
	return &anomalyRule{
		Anomaly:  *a,
		subject:  a.By.String(),
		fine:     fine,
		coarse:   coarse,
		nFine:    int(nFine),
		nCoarse:  int(nCoarse),
		shortSec: float64(nFine*fine) / float64(sec),
	}
}

// sameRings reports whether a and b keep the same rings for the same keys.
func (a *anomalyRule) sameRings(b *anomalyRule) bool {
	return a.By == b.By && a.fine == b.fine && a.coarse == b.coarse &&
		a.nFine == b.nFine && a.nCoarse == b.nCoarse
}

// configureAnomaly installs the anomaly rule, keeping the rings when their
// geometry and by are unchanged.
func (e *Engine) configureAnomaly(a *policy.Anomaly) {
	nr := compileAnomaly(a)
	if nr == nil || e.anomaly == nil || !nr.sameRings(e.anomaly) {
		e.anom.clear()
	}
	e.anomaly = nr
	e.anom.setMax(e.maxKeys)
}

// init empties st for rule's geometry, reusing its slot storage.
func (st *anomalyState) init(rule *anomalyRule) {
	n := rule.nFine + rule.nCoarse
	if cap(st.slots) < n {
		st.slots = make([]uint32, n)
	}
	st.slots = st.slots[:n]
	st.fine.c = st.slots[:rule.nFine:rule.nFine]
	st.coarse.c = st.slots[rule.nFine:]
	st.fine.reset()
	st.coarse.reset()
	st.last, st.touched, st.until = 0, 0, 0
}

// idle reports whether st has been unseen for a whole long window of the
// engine's clock and, on the key's own time, no measure is in force.
func (a *anomalyRule) idle(st *anomalyState, clock int64) bool {
	elapsed := clock - st.touched
	return elapsed >= int64(a.nCoarse)*a.coarse && st.until <= st.last+elapsed
}

// anomalyDecision counts d for its key and fires on an anomaly. Callers hold e.mu.
func (e *Engine) anomalyDecision(d *streams.Decision, ns int64, out []Action) []Action {
	a := e.anomaly
	value := decisionPart(d, a.By)
	if value == "" {
		return out
	}
	if a.By == policy.PartIP {
		value = e.ipKey(value) // an IPv6 client's prefix (7.1)
	}
	subject, key := a.subject, value
	if a.By == policy.PartDevice && !d.DeviceVerified {
		subject, key = ClaimSubject, claimKey(value) // claims count apart (7.1)
	}
	en := e.anom.get(key)
	if en == nil {
		en = e.anom.add(key)
		en.val.init(a)
	}
	st := &en.val
	st.touched = e.clock
	if !st.coarse.add(floorDiv(ns, a.coarse)) {
		return out // older than the long window: counts nowhere
	}
	st.fine.add(floorDiv(ns, a.fine)) // false: older than the short window, baseline only
	if ns > st.last {
		st.last = ns
	}
	if st.until > ns {
		return out
	}
	short := st.fine.sum
	var base uint64
	if st.coarse.sum > short {
		base = st.coarse.sum - short
	}
	// The baseline spans from the oldest coarse slot held to the start of
	// the short window.
	from := (st.coarse.head - int64(a.nCoarse) + 1) * a.coarse
	to := (st.fine.head - int64(a.nFine) + 1) * a.fine
	baseline := 0.0
	if to > from {
		baseline = float64(base) / (float64(to-from) / float64(time.Second))
	}
	baseline = max(baseline, a.MinBaseline)
	rate := float64(short) / a.shortSec
	if rate < a.Factor*baseline*(1-rateSlack) {
		return out
	}
	return e.fireAnomaly(a, subject, st, value, e.at, ns, short, rate, baseline, out)
}

// fireAnomaly sets the anomaly multiplier on (a.By, value) and appends the
// actions; a shadow rule appends only its alert, marked shadow.
func (e *Engine) fireAnomaly(a *anomalyRule, subject string, st *anomalyState, value string, ts time.Time, ns int64,
	count uint64, rate, baseline float64, out []Action) []Action {
	until := ts.Add(a.Duration)
	st.until = until.UnixNano()
	window := fmtDuration(time.Duration(float64(time.Second) * a.shortSec))
	m := bucket.Multiplier{
		Source:    anomalyRuleName,
		Value:     a.Multiplier,
		ExpiresAt: until,
		Reason: "anomaly: " + fmtFloat(rate) + "/s over " + window + ", baseline " + fmtFloat(baseline) +
			"/s (factor " + fmtFloat(a.Factor) + ")",
	}
	if !a.Shadow && e.setMultiplier(ns, subject, value, m, anomalyRuleName) {
		out = append(out, Action{Kind: SetMultiplier, Subject: subject, ID: value, Multiplier: m})
	}
	reason := subject + " " + value + ": " + strconv.FormatUint(count, 10) + " decisions in the last " + window +
		" (" + fmtFloat(rate) + "/s), " + fmtFloat(rate/baseline) + " times its baseline of " + fmtFloat(baseline) +
		"/s (fires at " + fmtFloat(a.Factor) + "x); limits tightened to x" + fmtFloat(a.Multiplier) +
		" for " + fmtDuration(a.Duration)
	if a.Shadow {
		reason += "; shadow rule: not enforced"
	}
	al := streams.Alert{
		V:          streams.SchemaVersion,
		ID:         alertID(streams.AlertAnomaly, anomalyRuleName, subject, value, ts),
		TS:         ts,
		Kind:       streams.AlertAnomaly,
		Subject:    subject,
		SubjectID:  value,
		Rule:       anomalyRuleName,
		Multiplier: a.Multiplier,
		Rate:       rate,
		Baseline:   baseline,
		ExpiresAt:  until,
		Reason:     reason,
		Count:      int(count),
		Shadow:     a.Shadow,
	}
	return append(out, Action{Kind: Alert, Subject: subject, ID: value, Alert: al})
}

// ceilDiv returns ceil(a/b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
