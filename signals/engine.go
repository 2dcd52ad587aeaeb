package signals

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// DefaultMaxKeys is Options.MaxKeys when it is not set.
const DefaultMaxKeys = 1 << 20

// Options configures an Engine.
type Options struct {
	// Risk is the policy's `risk` section. Velocity, Anomaly and
	// RepeatOffender are used; the other parts are handled elsewhere. A nil
	// Anomaly or RepeatOffender turns that signal off.
	Risk policy.Risk
	// Limits are the policy's limits; repeat offenders are counted per
	// (limit, key), the key made of the limit's `by` parts.
	Limits []policy.Limit
	// IPv6Prefix is the policy's identity.ipv6_prefix (7.1): measures
	// keyed by ip (velocity rules and the anomaly detector by ip, repeat
	// offenders of limits keyed by ip) count, lock and tighten an IPv6
	// client by this prefix of its address, under the id its buckets use
	// (bucket.IPSubjectID: 2001:db8:1:2::/64), so that rotating addresses
	// within it evades no threshold. 0 means policy.DefaultIPv6Prefix
	// (64); 128 keeps whole addresses. IPv4 addresses are always whole.
	IPv6Prefix int
	// MaxKeys bounds the keys tracked by each structure (velocity counters,
	// anomaly rings, repeat-offender counters, measures in force). When a
	// structure is full, its least recently seen key is evicted. Zero or
	// less means DefaultMaxKeys.
	MaxKeys int
}

// Stats counts the keys an Engine tracks, per structure. Each count is at
// most Options.MaxKeys.
type Stats struct {
	// Velocity is the number of (velocity rule, key) counters.
	Velocity int `json:"velocity"`
	// Anomaly is the number of keys with anomaly rings.
	Anomaly int `json:"anomaly"`
	// Offenders is the number of (limit, key) denial counters.
	Offenders int `json:"offenders"`
	// Episodes is the number of (limit, key) counters that went over
	// repeat_offender.per_minute and have been seen within the last minute
	// (the candidates Offenders looks at).
	Episodes int `json:"episodes"`
	// Measures is the number of locks and multipliers remembered (in force,
	// or expired and not yet swept).
	Measures int `json:"measures"`
	// Evicted counts the keys each structure evicted for room since New.
	Evicted Evictions `json:"evicted"`
}

// Evictions counts the keys evicted from full structures (least recently
// seen first), per structure. An evicted key forgets its state: a
// velocity count starts afresh, and an evicted measure is no longer
// re-asserted after Redis lost it (the store still holds it until it
// expires). riskd exports them as tollgate_riskd_signal_evictions_total.
type Evictions struct {
	Velocity  uint64 `json:"velocity"`
	Anomaly   uint64 `json:"anomaly"`
	Offenders uint64 `json:"offenders"`
	Measures  uint64 `json:"measures"`
	// MeasuresInForce is the part of Measures that was still in force (its
	// end after the engine's clock) when evicted.
	MeasuresInForce uint64 `json:"measures_in_force"`
}

// Engine computes abuse signals from events: velocity rules over reports,
// per-key anomalies and repeat offenders over decisions. It is a pure
// function of the events it is given (and of SetPolicy calls between them):
// time is taken only from event timestamps, so replaying the same events
// into a fresh Engine yields the same actions.
//
// Apply calls must come from one goroutine at a time. Offenders,
// TopOffenders, Active, Stats and SetPolicy may be called from any
// goroutine, concurrently with Apply (unless the engine came from
// NewSingleGoroutine). The zero Engine is not usable; call New.
type Engine struct {
	mu       sync.Mutex
	unshared bool // made by NewSingleGoroutine: lock and unlock do nothing

	maxKeys   int
	ident     policy.Identity // IPv6Prefix only: ipKey's prefix
	vrules    []*velRule
	anomaly   *anomalyRule // nil: anomaly detection off
	limits    map[string]*limitRule
	perMinute int // 0: repeat offenders off

	vel  *lru[velState]
	anom *lru[anomalyState]
	off  *lru[offState]
	meas *lru[measure]
	// measInForce counts the measures evicted while in force (meas.onEvict).
	measInForce uint64

	// episodes lists the offender entries that may be in the offender list;
	// offState.epIdx is an entry's index here.
	episodes []*entry[offState]
	epSweep  int

	// seen, lastSeq, lastIndex: the newest (seq, index) processed.
	seen      bool
	lastSeq   uint64
	lastIndex int
	// clock is the newest event time seen (Unix ns), at most bound; it
	// only drives the sweeping of idle keys, never a verdict.
	clock int64
	// bound is the latest time the clock may reach (Unix ns; 0: none):
	// BoundClock. An event is counted no later than bound and no earlier
	// than bound - 2*MaxClockSkew (eventAt).
	bound int64
	// at is the time the event being applied counts at: its ts, or the
	// nearer end of the bound's range (eventAt).
	at time.Time

	buf []byte // scratch for composite keys

	// ipPrefix is the IPv6 prefix ipKey last masked an address to, ipID
	// its id: the addresses of one client's prefix share one string.
	ipPrefix netip.Prefix
	ipID     string
}

// New returns an Engine for the options.
func New(o Options) *Engine {
	e := &Engine{
		vel:  newLRU[velState](DefaultMaxKeys),
		anom: newLRU[anomalyState](DefaultMaxKeys),
		off:  newLRU[offState](DefaultMaxKeys),
		meas: newLRU[measure](DefaultMaxKeys),
		buf:  make([]byte, 0, 256),
	}
	e.off.onRemove = e.dropEpisode
	// a counter holding more events (or a measure it set in force)
	// outlives those holding fewer that a flood of fresh ids adds: an
	// attacker cannot reset a victim's failures by failing once, or twice,
	// on more accounts than the table holds between guesses; he must fail
	// on each as often as the victim's count
	e.vel.worth = func(en *entry[velState]) uint64 { return en.val.worth(e.clock) }
	e.meas.onEvict = func(en *entry[measure]) {
		if en.val.end > e.clock {
			e.measInForce++
		}
	}
	e.configure(o)
	return e
}

// NewSingleGoroutine returns an Engine for the options whose every call,
// Offenders, TopOffenders, Active, Stats and SetPolicy included, comes from one
// goroutine at a time: limiter replay's private engines, fed by one loop.
// It takes no lock, because a lock's atomic instructions also stall the
// cache misses around them, a visible share of a replayed event's cost.
// It acts exactly like New's engine (TestDeterministicReplay); calling it
// from two goroutines at once is a data race.
func NewSingleGoroutine(o Options) *Engine {
	e := New(o)
	e.unshared = true
	return e
}

// ipKey returns the id measures keyed by ip count and act on for the
// address ip (7.1): the IPv6 prefix of Options.IPv6Prefix as
// bucket.IPSubjectID writes it (engine.IPKey's id, that of the limiter's
// buckets and locks), else ip itself: an IPv4 (or IPv4-mapped) address,
// every address with prefix 128, an id that is no address (a prefix id
// given back, as an admin lift's). Only an ip with a colon is parsed, and
// it allocates only when its prefix differs from the last one masked.
// Callers hold e.mu.
func (e *Engine) ipKey(ip string) string {
	if e.ident.IPv6Prefix == 128 || strings.IndexByte(ip, ':') < 0 {
		return ip // IPv4 (or no address): not even parsed, so free
	}
	a, err := netip.ParseAddr(ip)
	if err != nil || !a.Is6() || a.Is4In6() {
		return ip
	}
	p := e.ident.IPKeyPrefix(a)
	if p != e.ipPrefix || e.ipID == "" {
		e.ipPrefix, e.ipID = p, bucket.IPSubjectID(p)
	}
	return e.ipID
}

// SetPolicy swaps in new rules (a policy reload). Counters of velocity
// rules whose name, event and `by` are unchanged are kept (re-sized if the
// threshold or window changed); anomaly rings are kept when `by` and the
// window geometry are unchanged; repeat-offender counters are kept for
// limits whose name and `by` are unchanged. Measures in force are kept.
// Everything else is dropped. A changed IPv6Prefix counts IPv6 clients
// under new ids from then on; the counts under the old ones age out.
func (e *Engine) SetPolicy(o Options) {
	e.lock()
	defer e.unlock()
	e.configure(o)
}

// ApplyDecision processes one decision and appends the actions it causes
// to out (anomaly multipliers and alerts, repeat-offender alerts), returning
// the extended slice. seq is the JetStream stream sequence of the message
// carrying the decision and index its position in the message's batch; a
// (seq, index) not after the last one processed is a redelivery and is
// ignored. seq 0 disables that check. Decisions of requests on an allow
// list (result allowed_list) are ignored. Decisions with a zero timestamp, or
// one before 1970 or after 2223, are ignored (after the dedupe check). In steady state (keys already tracked, nothing firing) it does
// not allocate.
func (e *Engine) ApplyDecision(seq uint64, index int, d *streams.Decision, out []Action) []Action {
	if d == nil {
		return out
	}
	e.lock()
	defer e.unlock()
	if !e.fresh(seq, index) || d.Result == "allowed_list" {
		return out // an allow list exempts the request from every signal
	}
	ns, ok := e.eventAt(d.TS)
	if !ok {
		return out
	}
	e.advanceClock(ns)
	if e.anomaly != nil {
		out = e.anomalyDecision(d, ns, out)
	}
	if e.perMinute > 0 && !d.Allowed && d.Result == "limited" && d.Limit != "" {
		out = e.offenderDecision(d, ns, out)
	}
	e.sweepDecision()
	return out
}

// ApplyReport processes one report and appends the actions it causes to out
// (locks, velocity multipliers and alerts; a ClearLock for a step_up_passed
// report), returning the extended slice. seq and index work as for
// ApplyDecision, in the same sequence space. Reports of identities on an
// allow list (AllowList set) count only for lockout and step-up rules: no
// allow list exempts from those (7.1), so none makes an account
// brute-forceable (a step_up_passed still clears the account's lock). Reports with a zero or out-of-range
// timestamp are ignored.
func (e *Engine) ApplyReport(seq uint64, index int, r *streams.Report, out []Action) []Action {
	if r == nil {
		return out
	}
	e.lock()
	defer e.unlock()
	if !e.fresh(seq, index) {
		return out
	}
	ns, ok := e.eventAt(r.TS)
	if !ok {
		return out
	}
	e.advanceClock(ns)
	if r.Type == streams.ReportStepUpPassed && r.Account != "" {
		out = e.stepUpPassed(r, ns, out)
	}
	out = e.velocityReport(r, ns, out)
	e.sweepReport()
	return out
}

// Offenders lists the current repeat offenders at now: the (limit, key)
// pairs denied more than repeat_offender.per_minute times in (now-60s, now]
// (1 s slots), worst (highest count) first, ties by limit then key (then,
// for keys shown alike because a part holds "|", by their parts). It
// returns nil when repeat offenders are off. It sorts every offender;
// TopOffenders lists only the worst.
func (e *Engine) Offenders(now time.Time) []Offender {
	list, _ := e.TopOffenders(now, -1)
	return list
}

// TopOffenders returns the first k of Offenders(now) (all of them when k
// is negative) and the number of repeat offenders per limit name, every
// one counted, not only the k listed (limits without one are absent). It
// keeps the worst k in a bounded heap instead of sorting every offender,
// so a key-rotation attack's 200,000 offenders cost about one comparison
// each while it holds the engine's lock. It returns nil, nil when repeat
// offenders are off.
func (e *Engine) TopOffenders(now time.Time, k int) ([]Offender, map[string]int) {
	e.lock()
	defer e.unlock()
	if e.perMinute <= 0 {
		return nil, nil
	}
	ns, ok := eventTime(now)
	if !ok {
		return nil, nil
	}
	return e.topOffenders(floorDiv(ns, int64(time.Second)), k)
}

// Active returns a SetLock or SetMultiplier action for every measure the
// engine set that is still in force at now, as it was first returned (same
// Until / ExpiresAt), sorted by subject, id, then locks before multipliers.
// riskd re-asserts them after Redis comes back empty. Measures lifted by
// the engine (a step_up_passed report) or evicted under memory pressure are
// not listed; lifts the engine did not see (admin) are.
func (e *Engine) Active(now time.Time) []Action {
	e.lock()
	defer e.unlock()
	ns, ok := eventTime(now)
	if !ok {
		return nil
	}
	var acts []Action
	e.meas.each(func(en *entry[measure]) {
		if en.val.end > ns {
			acts = append(acts, en.val.act)
		}
	})
	slices.SortFunc(acts, func(a, b Action) int {
		if c := cmp.Compare(a.Subject, b.Subject); c != 0 {
			return c
		}
		if c := cmp.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Lock.Rule, b.Lock.Rule); c != 0 {
			return c
		}
		return cmp.Compare(a.Multiplier.Source, b.Multiplier.Source)
	})
	return acts
}

// Stats returns the number of keys tracked per structure.
func (e *Engine) Stats() Stats {
	e.lock()
	defer e.unlock()
	return Stats{
		Velocity:  e.vel.len(),
		Anomaly:   e.anom.len(),
		Offenders: e.off.len(),
		Episodes:  len(e.episodes),
		Measures:  e.meas.len(),
		Evicted: Evictions{Velocity: e.vel.evicted, Anomaly: e.anom.evicted, Offenders: e.off.evicted,
			Measures: e.meas.evicted, MeasuresInForce: e.measInForce},
	}
}

// lock locks e.mu unless the engine is unshared (its one goroutine then
// owns it, and "callers hold e.mu" holds trivially); unlock unlocks it.
func (e *Engine) lock() {
	if !e.unshared {
		e.mu.Lock()
	}
}

func (e *Engine) unlock() {
	if !e.unshared {
		e.mu.Unlock()
	}
}

// fresh reports whether (seq, index) comes after the last one processed,
// and records it. Callers hold e.mu.
func (e *Engine) fresh(seq uint64, index int) bool {
	if seq == 0 {
		return true
	}
	if e.seen && (seq < e.lastSeq || seq == e.lastSeq && index <= e.lastIndex) {
		return false
	}
	e.seen, e.lastSeq, e.lastIndex = true, seq, index
	return true
}

// MaxClockSkew is how far from its stream's time (BoundClock) an event's
// ts may be and still count at that ts: a later one counts at the stream
// time + MaxClockSkew, an earlier one at the stream time - MaxClockSkew.
const MaxClockSkew = time.Minute

// BoundClock bounds the time of the events that follow to within
// MaxClockSkew of t, the time the event stream gives the next event
// (riskd: its JetStream message's timestamp, so a replay of the same
// record is the same). An event within it counts at its own ts (hosts a
// little apart keep their order); one outside it counts, and its measure
// and alert are stamped, at the nearer end (streams.Report and Decision
// keep their ts). So a limiter host whose clock is off by an hour neither
// blinds a key's window (one report an hour ahead once put every real
// failure outside the window it was judged by) nor sets measures that
// have ended before they are written (a lockout from a host 20 minutes
// behind expired at once), and it does not move the engine's clock an
// hour on (every key, every measure in force with it, would look idle
// and be swept). A zero t removes the bound (events count at their own
// ts and the clock is the newest seen). Until it is called, there is
// none.
func (e *Engine) BoundClock(t time.Time) {
	e.lock()
	defer e.unlock()
	e.bound = 0
	if ns, ok := eventTime(t.Add(MaxClockSkew)); ok {
		e.bound = ns
	}
}

// eventAt returns the Unix ns an event stamped ts counts at, and records
// it as time in e.at: ts, within the bound's range (BoundClock), else
// the nearer end of it. ok is false for a ts eventTime refuses. Callers
// hold e.mu.
func (e *Engine) eventAt(ts time.Time) (int64, bool) {
	ns, ok := eventTime(ts)
	if !ok {
		return 0, false
	}
	e.at = ts
	if e.bound > 0 {
		switch lo := e.bound - 2*int64(MaxClockSkew); {
		case ns > e.bound:
			ns = e.bound
		case ns < lo && lo > 0:
			ns = lo
		default:
			return ns, true
		}
		e.at = time.Unix(0, ns).UTC()
	}
	return ns, true
}

// advanceClock moves the engine's clock to ns, at most to its bound, if
// that is newer. Callers hold e.mu.
func (e *Engine) advanceClock(ns int64) {
	if e.bound > 0 && ns > e.bound {
		ns = e.bound
	}
	if ns > e.clock {
		e.clock = ns
	}
}

// sweepDecision looks at one entry of each structure decisions feed and
// drops it if it is idle. A key is idle once it has gone unseen while the
// engine's clock (the newest event time) moved on by its window, and holds
// nothing else that matters (a measure in force, an episode, escalation
// history) on its own time: its newest event time plus that elapsed time.
// So a host whose clock lags the others does not get its keys swept while
// they are in use. Callers hold e.mu.
func (e *Engine) sweepDecision() {
	if en := e.anom.sweepNext(); en != nil && e.anomaly != nil && e.anomaly.idle(&en.val, e.clock) {
		e.anom.remove(en)
	}
	if en := e.off.sweepNext(); en != nil && e.offenderIdle(&en.val) {
		e.off.remove(en)
	}
	e.sweepEpisodes()
	e.sweepMeasures()
}

// sweepReport is sweepDecision for the structures reports feed.
func (e *Engine) sweepReport() {
	if en := e.vel.sweepNext(); en != nil && en.val.idle(e.clock) {
		e.vel.remove(en)
	}
	e.sweepMeasures()
}

// sweepMeasures drops one measure if it has run its course by the engine's clock.
func (e *Engine) sweepMeasures() {
	if en := e.meas.sweepNext(); en != nil && en.val.sweepAt <= e.clock {
		e.meas.remove(en)
	}
}

// maxEventSec bounds the event times the engine accepts: from the Unix
// epoch to 8e9 s (year 2223), so that nanoseconds, slot indexes and their
// differences never overflow an int64.
const maxEventSec = 8_000_000_000

// eventTime returns t in Unix nanoseconds, or false for a zero time or one
// outside [1970, 2223].
func eventTime(t time.Time) (int64, bool) {
	if t.IsZero() {
		return 0, false
	}
	if s := t.Unix(); s < 0 || s > maxEventSec {
		return 0, false
	}
	return t.UnixNano(), true
}

// configure compiles o into the engine, keeping what SetPolicy keeps.
// Callers hold e.mu (or own e).
func (e *Engine) configure(o Options) {
	e.maxKeys = o.MaxKeys
	if e.maxKeys <= 0 {
		e.maxKeys = DefaultMaxKeys
	}
	e.ident = policy.Identity{IPv6Prefix: o.IPv6Prefix}
	e.ipPrefix, e.ipID = netip.Prefix{}, ""
	e.configureVelocity(o.Risk.Velocity)
	e.configureAnomaly(o.Risk.Anomaly)
	e.configureOffenders(o.Risk.RepeatOffender, o.Limits)
	e.meas.setMax(e.maxKeys)
}
