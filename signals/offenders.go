package signals

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// offenderSlots is the repeat-offender window: 60 slots of 1 s.
const offenderSlots = 60

// second and minute in nanoseconds.
const (
	second = int64(time.Second)
	minute = int64(time.Minute)
)

// limitRule is a policy limit as the repeat-offender counter needs it.
type limitRule struct {
	Name string
	By   []policy.KeyPart
	// ByAttr is the limit's policy.Limit.ByAttr (attribute names).
	ByAttr []string
	// subjectPart is the index in By of the first subject part, -1 if none.
	subjectPart int
	// subject is that part as text, "ip" when there is none.
	subject string
	// listed counts the limit's offenders within topOffenders, 0 outside
	// it; e.mu held.
	listed int
}

// offState is the denial counter of one (limit, key).
type offState struct {
	lim  *limitRule
	ring ring  // denials in 1 s slots over the last minute
	last int64 // newest denial, Unix ns
	// touched is the engine's clock when the key was last seen.
	touched int64
	// inEpisode is set from the denial that took the count over per_minute
	// (since) until the key has been out of the list for a full minute.
	inEpisode bool
	since     int64
	// lastOver is the newest denial at which the count was over per_minute;
	// outAt the first later denial at which it was not (0: none yet).
	lastOver, outAt int64
	// epIdx is the entry's index in Engine.episodes, -1 when absent.
	epIdx int
}

// compileLimit returns the limit's rule, or nil for a limit without name or key.
func compileLimit(l policy.Limit) *limitRule {
	if l.Name == "" || len(l.By) == 0 {
		return nil
	}
	r := &limitRule{Name: l.Name, By: slices.Clone(l.By), ByAttr: slices.Clone(l.ByAttr), subjectPart: -1, subject: policy.PartIP.String()}
	for i, p := range l.By {
		if p.IsSubject() {
			r.subjectPart, r.subject = i, p.String()
			break
		}
	}
	return r
}

// configureOffenders installs the limits and per_minute, keeping counters
// of limits whose name and by are unchanged.
func (e *Engine) configureOffenders(ro *policy.RepeatOffender, limits []policy.Limit) {
	e.perMinute = 0
	if ro != nil {
		e.perMinute = ro.PerMinute
		if e.perMinute <= 0 {
			e.perMinute = policy.DefaultRepeatOffenderPerMinute
		}
	}
	e.limits = make(map[string]*limitRule, len(limits))
	for _, l := range limits {
		if r := compileLimit(l); r != nil {
			e.limits[r.Name] = r
		}
	}
	e.off.each(func(en *entry[offState]) {
		nl := e.limits[en.val.lim.Name]
		if e.perMinute == 0 || nl == nil || !slices.Equal(nl.By, en.val.lim.By) || !slices.Equal(nl.ByAttr, en.val.lim.ByAttr) {
			e.off.remove(en)
			return
		}
		en.val.lim = nl
	})
	e.off.setMax(e.maxKeys)
}

// decisionPart returns the decision's value of a key part ("" if absent).
func decisionPart(d *streams.Decision, p policy.KeyPart) string {
	switch p {
	case policy.PartGlobal:
		return "global"
	case policy.PartIP:
		return d.IP
	case policy.PartUser:
		return d.UserID
	case policy.PartDevice:
		return d.DeviceID
	case policy.PartAccount:
		return d.Account
	case policy.PartASN:
		return d.ASN
	case policy.PartRoute:
		if d.Route != "" {
			return d.Route // the matched route, as bucket keys use
		}
		return d.Endpoint
	}
	return ""
}

// offenderDecision counts the denial d (result limited) for its limit's
// key and alerts when the key enters the offender list. Callers hold e.mu.
func (e *Engine) offenderDecision(d *streams.Decision, ns int64, out []Action) []Action {
	lim := e.limits[d.Limit]
	if lim == nil {
		return out
	}
	b := append(append(e.buf[:0], lim.Name...), 0)
	for i, p := range lim.By {
		v := decisionPart(d, p)
		if p == policy.PartAttr && i < len(lim.ByAttr) {
			v = d.Attributes[lim.ByAttr[i]]
		}
		if v == "" {
			e.buf = b
			return out // the limit does not apply to this request
		}
		if p == policy.PartIP {
			v = e.ipKey(v) // the limit's bucket key: an IPv6 client's prefix (7.1)
		}
		if i > 0 {
			b = append(b, 0) // no id holds a NUL (control characters are refused); "|" can be in one
		}
		b = append(b, v...)
	}
	e.buf = b
	en := e.off.getBytes(b)
	if en == nil {
		en = e.off.addBytes(b)
		en.val.init(lim)
	}
	st := &en.val
	st.touched = e.clock
	if !st.ring.add(floorDiv(ns, second)) {
		return out // older than the last minute
	}
	st.last = max(st.last, ns)
	if st.inEpisode && ns-st.exitEstimate() >= minute {
		st.inEpisode = false
	}
	count := st.ring.sum
	if count <= uint64(e.perMinute) {
		if st.inEpisode && st.outAt == 0 && ns > st.lastOver {
			st.outAt = ns
		}
		return out
	}
	st.lastOver = max(st.lastOver, ns)
	st.outAt = 0
	if st.epIdx < 0 {
		st.epIdx = len(e.episodes)
		e.episodes = append(e.episodes, en)
	}
	if st.inEpisode {
		return out
	}
	st.inEpisode, st.since = true, ns
	return e.alertOffender(lim, d, offenderKey(en.key, lim.Name), count, out)
}

// offenderKey returns the key of an offender entry as shown (alerts, the
// admin list): the limit's parts joined with "|".
func offenderKey(entry, limit string) string {
	return strings.ReplaceAll(entry[len(limit)+1:], "\x00", "|")
}

// init empties st for lim, reusing its ring.
func (st *offState) init(lim *limitRule) {
	*st = offState{lim: lim, ring: st.ring, epIdx: -1}
	st.ring.init(offenderSlots)
}

// exitEstimate returns when the key left the offender list after its last
// over-limit denial: the first later denial seen below the limit, or when
// that denial's slot left the window, whichever is earlier (an upper bound
// of the exact time).
func (st *offState) exitEstimate() int64 {
	exit := (floorDiv(st.lastOver, second) + offenderSlots) * second
	if st.outAt != 0 && st.outAt < exit {
		exit = st.outAt
	}
	return exit
}

// offenderGone is how long a key must go unseen, by the engine's clock,
// for all its denials to have left the window (60 slots, plus the partial one).
const offenderGone = (offenderSlots + 1) * second

// offenderIdle reports whether st has been unseen long enough for all its
// denials to have left the window and, on the key's own time, its episode
// is over.
func (e *Engine) offenderIdle(st *offState) bool {
	elapsed := e.clock - st.touched
	if elapsed < offenderGone {
		return false
	}
	return !st.inEpisode || st.last+elapsed-st.exitEstimate() >= minute
}

// dropEpisode removes en from e.episodes (the lru's onRemove hook).
func (e *Engine) dropEpisode(en *entry[offState]) {
	i := en.val.epIdx
	if i < 0 {
		return
	}
	last := len(e.episodes) - 1
	e.episodes[i] = e.episodes[last]
	e.episodes[i].val.epIdx = i
	e.episodes[last] = nil
	e.episodes = e.episodes[:last]
	en.val.epIdx = -1
}

// sweepEpisodes looks at one candidate of the offender list and drops it
// once it has been unseen long enough for all its denials to have left
// the window.
func (e *Engine) sweepEpisodes() {
	n := len(e.episodes)
	if n == 0 {
		return
	}
	i := e.epSweep % n
	en := e.episodes[i]
	if e.clock-en.val.touched >= offenderGone {
		e.dropEpisode(en) // the entry swapped into i is looked at next
		e.epSweep = i
		return
	}
	e.epSweep = i + 1
}

// alertOffender appends the repeat_offender alert of (lim, key).
func (e *Engine) alertOffender(lim *limitRule, d *streams.Decision, key string, count uint64, out []Action) []Action {
	id := e.ipKey(d.IP)
	if lim.subjectPart >= 0 {
		id = decisionPart(d, lim.By[lim.subjectPart])
		if lim.By[lim.subjectPart] == policy.PartIP {
			id = e.ipKey(id)
		}
	}
	p := e.perMinute
	a := streams.Alert{
		V:          streams.SchemaVersion,
		ID:         alertID(streams.AlertRepeatOffender, lim.Name, lim.subject, key, e.at),
		TS:         e.at,
		Kind:       streams.AlertRepeatOffender,
		Subject:    lim.subject,
		SubjectID:  id,
		Rule:       lim.Name,
		Multiplier: 1,
		Rate:       float64(count) / 60,
		Baseline:   float64(p) / 60,
		ExpiresAt:  e.at.Add(time.Minute),
		Reason: "limit " + lim.Name + " denied key " + strconv.Quote(key) + " " + strconv.FormatUint(count, 10) +
			" times in the last minute (more than " + strconv.Itoa(p) + ")",
		Count: int(count),
	}
	return append(out, Action{Kind: Alert, Subject: lim.subject, ID: id, Alert: a})
}

// offCand is a repeat offender as topOffenders ranks it: its entry and
// its denials in the last minute.
type offCand struct {
	en    *entry[offState]
	count uint64
}

// compareOff orders offenders as listed: a negative result when a comes
// first. The higher count first, then by limit, then by key as shown
// (offenderKey), then by the entry key, which differs for keys shown
// alike (a part holding "|"), so that no two offenders tie.
func compareOff(a, b offCand) int {
	if a.count != b.count {
		return cmp.Compare(b.count, a.count)
	}
	la, lb := a.en.val.lim.Name, b.en.val.lim.Name
	if la != lb {
		return cmp.Compare(la, lb)
	}
	if c := compareShown(a.en.key[len(la)+1:], b.en.key[len(lb)+1:]); c != 0 {
		return c
	}
	return cmp.Compare(a.en.key, b.en.key)
}

// compareShown compares two entry keys' parts as offenderKey shows them,
// NUL as "|", without building the strings.
func compareShown(a, b string) int {
	for i := range min(len(a), len(b)) {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		if x == 0 {
			x = '|'
		}
		if y == 0 {
			y = '|'
		}
		if x != y {
			return cmp.Compare(x, y)
		}
	}
	return cmp.Compare(len(a), len(b))
}

// topOffenders is TopOffenders at slot s. Until k offenders are found it
// collects them; then it keeps them in a heap whose root is the one
// listed last, and a later offender replaces the root only when it comes
// before it (most are rejected by that one comparison). Only the k kept
// are sorted and turned into Offenders. Callers hold e.mu.
func (e *Engine) topOffenders(s int64, k int) ([]Offender, map[string]int) {
	if k < 0 {
		k = len(e.episodes)
	}
	h := make([]offCand, 0, min(k, len(e.episodes)))
	var lims []*limitRule // the limits whose listed this call raised
	for _, en := range e.episodes {
		st := &en.val
		c := st.ring.countTo(s, offenderSlots)
		if c <= uint64(e.perMinute) {
			continue
		}
		if st.lim.listed == 0 {
			lims = append(lims, st.lim)
		}
		st.lim.listed++
		x := offCand{en: en, count: c}
		switch {
		case len(h) < k:
			if h = append(h, x); len(h) == k {
				for i := k/2 - 1; i >= 0; i-- {
					siftDownOff(h, i)
				}
			}
		case k > 0 && compareOff(x, h[0]) < 0:
			h[0] = x
			siftDownOff(h, 0)
		}
	}
	perLimit := make(map[string]int, len(lims))
	for _, l := range lims {
		perLimit[l.Name] = l.listed
		l.listed = 0
	}
	slices.SortFunc(h, compareOff)
	var list []Offender
	if len(h) > 0 {
		list = make([]Offender, len(h))
	}
	for i, x := range h {
		st := &x.en.val
		list[i] = Offender{
			Limit: st.lim.Name,
			Key:   offenderKey(x.en.key, st.lim.Name),
			Count: int(x.count),
			Since: time.Unix(0, st.since).UTC(),
		}
	}
	return list, perLimit
}

// siftDownOff restores h's heap order (each candidate listed after its
// children) below i.
func siftDownOff(h []offCand, i int) {
	for {
		j := 2*i + 1
		if j >= len(h) {
			return
		}
		if r := j + 1; r < len(h) && compareOff(h[r], h[j]) > 0 {
			j = r
		}
		if compareOff(h[j], h[i]) <= 0 {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}
