package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/reputation"
	"github.com/tollgate-dev/tollgate/risk"
	"github.com/tollgate-dev/tollgate/streams"
)

// Limits of a replay's state, by default those of the running daemons.
const (
	// DefaultMaxKeys bounds each memory store's buckets, as the limiter's
	// --memory-max-keys default.
	DefaultMaxKeys = bucket.DefaultMaxKeys
	// DefaultMaxIdentities bounds the identity tables, as riskd bounds
	// each signal's keys.
	DefaultMaxIdentities = risk.DefaultMaxKeys
)

// Policies are the two policies a replay compares.
type Policies struct {
	// Candidate and Baseline are the policies (required).
	Candidate, Baseline *policy.Policy
	// CandidateName and BaselineName name them in the report.
	CandidateName, BaselineName string
}

// Limits bounds a Replayer's state; zero fields take the defaults.
type Limits struct {
	// MaxKeys bounds each memory store's buckets (DefaultMaxKeys).
	MaxKeys int
	// SignalKeys bounds each risk-engine structure (risk.DefaultMaxKeys).
	SignalKeys int
	// MaxIdentities bounds the identity tables (DefaultMaxIdentities).
	MaxIdentities int
	// MaxAdminChanges bounds the admin changes of the audit stream held
	// (DefaultMaxAdminChanges): the newest are kept.
	MaxAdminChanges int
}

func (l *Limits) defaults() {
	if l.MaxKeys <= 0 {
		l.MaxKeys = DefaultMaxKeys
	}
	if l.SignalKeys <= 0 {
		l.SignalKeys = risk.DefaultMaxKeys
	}
	if l.MaxIdentities <= 0 {
		l.MaxIdentities = DefaultMaxIdentities
	}
	if l.MaxAdminChanges <= 0 {
		l.MaxAdminChanges = DefaultMaxAdminChanges
	}
}

// Replayer re-runs recorded events under two policies and tallies the
// differences. Feed it events in event-time order with Decision, Report
// and Audit, then call Result. It is not safe for concurrent use.
type Replayer struct {
	p        Policies
	l        Limits
	sims     [2]*sim
	t        *tally
	from, to time.Time
	closers  []func()
	sink     int   // see prefetch
	at       int64 // the stream time the risk engines' clocks are bound by (streamTime)
}

// NewReplayer returns a Replayer for p. A policy that names an ASN
// database has it opened (Close closes it).
func NewReplayer(p Policies, l Limits) (*Replayer, error) {
	if p.Candidate == nil || p.Baseline == nil {
		return nil, errors.New("replay: candidate and baseline policies are required")
	}
	l.defaults()
	r := &Replayer{p: p, l: l, t: newTally(l.MaxIdentities)}
	for which, pol := range []*policy.Policy{base: p.Baseline, cand: p.Candidate} {
		rules, err := r.rules(pol)
		if err != nil {
			r.Close()
			return nil, err
		}
		s, err := newSim(pol, rules, simOptions{MaxKeys: l.MaxKeys, SignalKeys: l.SignalKeys})
		if err != nil {
			r.Close()
			return nil, err
		}
		w := which
		s.onMeasure = func(a *streams.Alert) { r.t.measure(w, a) }
		r.sims[which] = s
	}
	return r, nil
}

// rules builds pol's reputation rules, opening its ASN database.
func (r *Replayer) rules(pol *policy.Policy) (*reputation.Rules, error) {
	rep := pol.Risk.Reputation
	if rep == nil {
		return nil, nil
	}
	var db *reputation.DB
	if rep.ASNDatabase != "" {
		var err error
		if db, err = reputation.OpenDB(rep.ASNDatabase); err != nil {
			return nil, fmt.Errorf("replay: reputation: %w", err)
		}
		r.closers = append(r.closers, func() { _ = db.Close() })
	}
	return reputation.New(rep, db), nil
}

// Close releases the ASN databases.
func (r *Replayer) Close() {
	for _, c := range r.closers {
		c()
	}
	r.closers = nil
}

// Decision replays one recorded decision under both policies.
func (r *Replayer) Decision(d *streams.Decision) {
	if _, ok := eventNs(d.TS); !ok {
		r.t.skipped++
		return
	}
	addr, _ := netip.ParseAddr(d.IP) // once for both policies' reputation rules
	if !r.sims[base].decide(d, addr) || !r.sims[cand].decide(d, addr) {
		r.t.skipped++
		return
	}
	r.seen(d.TS)
	r.t.decision(d, &r.sims)
}

// prefetch touches each cache line of d that Decision will read, while
// the decision before it is replayed: d sat in the reorder window and has
// left the caches, and touching it early overlaps those misses with
// useful work. Go has no prefetch instruction, so it loads a word of each
// line and keeps their sum in r.sink, where the compiler cannot drop the
// loads.
func (r *Replayer) prefetch(d *streams.Decision) {
	n := len(d.RequestID) + len(d.Endpoint) + len(d.IP) + len(d.DeviceID)
	if d.Cost > 0 {
		n++
	}
	r.sink += n
}

// Report replays one recorded report under both policies.
func (r *Replayer) Report(rep *streams.Report) {
	if _, ok := eventNs(rep.TS); !ok {
		r.t.skipped++
		return
	}
	r.seen(rep.TS)
	r.sims[base].report(rep)
	r.sims[cand].report(rep)
	r.t.report(rep)
}

// streamTime bounds both risk engines' clocks by at, the timestamp of the
// stream message that holds the next event, as riskd bounds its engine's
// by each message's (signals.Engine.BoundClock): an event from a host
// whose clock ran ahead sweeps no more here than it did there. 0 (no
// timestamp) keeps the bound in force.
func (r *Replayer) streamTime(at int64) {
	if at == 0 || at == r.at {
		return
	}
	r.at = at
	for _, s := range r.sims {
		s.sig.BoundClock(time.Unix(0, at))
	}
}

func (r *Replayer) seen(ts time.Time) {
	if r.from.IsZero() || ts.Before(r.from) {
		r.from = ts
	}
	if ts.After(r.to) {
		r.to = ts
	}
}

// Result returns the report of everything replayed so far.
func (r *Replayer) Result() *Report {
	rep := r.t.build()
	rep.Candidate, rep.Baseline = r.p.CandidateName, r.p.BaselineName
	rep.Record.From, rep.Record.To = r.from.UTC(), r.to.UTC()
	rep.Bounds.StoreFull = r.sims[base].full || r.sims[cand].full
	return rep
}

// Options configures Run.
type Options struct {
	Policies
	Limits
	// JetStream reads the record (required).
	JetStream jetstream.JetStream
	// Streams names the streams and subjects, as the limiter's
	// --subject-prefix and --stream-name.
	Streams streams.Config
	// Range selects the part of the record.
	Range Range
	// ReorderWindow is how far out of event-time order events may arrive
	// and still replay in order (default DefaultReorderWindow).
	ReorderWindow time.Duration
	// Progress, when set, receives a progress line every ProgressEvery
	// (default 1s) once a replay has run that long, and a last one.
	Progress      io.Writer
	ProgressEvery time.Duration
	// Now is the clock for --since and progress rates (default time.Now).
	Now func() time.Time
}

// Run reads the record from JetStream and replays it.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.JetStream == nil {
		return nil, errors.New("replay: JetStream is required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ReorderWindow <= 0 {
		o.ReorderWindow = DefaultReorderWindow
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = time.Second
	}
	r, err := NewReplayer(o.Policies, o.Limits)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	warmup := Warmup(o.Candidate, o.Baseline)
	dec, rep, err := openReaders(ctx, o.JetStream, o.Streams, o.Range, o.Now(), o.ReorderWindow, warmup)
	if err != nil {
		return nil, err
	}
	aud, err := openAudit(ctx, o.JetStream, o.Streams, o.ReorderWindow)
	if err != nil {
		return nil, err
	}
	jour, err := openJournal(ctx, o.JetStream, o.Streams, o.ReorderWindow)
	if err != nil {
		return nil, err
	}
	if dec.last == 0 {
		aud.last, jour.last = 0, 0 // no decisions: nothing to compare
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dch, rch, ach, jch := make(chan []event, 4), make(chan []event, 4), make(chan []event, 4), make(chan []event, 4)
	errs := make(chan error, 4)
	go func() { errs <- aud.run(ctx, o.JetStream, ach) }()
	go func() { errs <- jour.run(ctx, o.JetStream, jch) }()
	go func() { errs <- dec.run(ctx, o.JetStream, dch) }()
	go func() { errs <- rep.run(ctx, o.JetStream, rch) }()
	stopProgress := startProgress(o, dec, rep)
	// the admin changes and the trust journal are read first, whole: each
	// change applies at its place among the events, the enrolments in
	// force at the start before the first (merge)
	audits, dropped := collectWhole(ach, r.l.MaxAdminChanges)
	trusts, droppedTrust := collectWhole(jch, r.l.SignalKeys)
	merge(r, dch, rch, audits, trusts, int64(warmup))
	stopProgress()
	for range 4 {
		if err := <-errs; err != nil {
			return nil, err
		}
	}
	out := r.Result()
	out.Bounds.DroppedAdminChanges, out.Bounds.DroppedTrustedDevices = dropped, droppedTrust
	out.Record.Skipped += dec.skipped.Load() + rep.skipped.Load() + aud.skipped.Load() + jour.skipped.Load()
	out.Record.FirstSeq, out.Record.LastSeq = dec.first.Load(), dec.seq.Load()
	return out, nil
}

// Warmup is how far before the first decision replayed the reports are
// replayed too: the longest velocity window of the policies, so that the
// rules start with the counts riskd had.
func Warmup(policies ...*policy.Policy) time.Duration {
	var w time.Duration
	for _, p := range policies {
		for _, v := range p.Risk.Velocity {
			w = max(w, v.Window)
		}
	}
	return w
}

// merge replays the two ordered streams of chunks into r, in event-time
// order (decisions first at equal times), until both are closed, and
// applies the admin changes of audits (in event-time order) before the
// first event after them. Reports more than warmup ns before the first
// decision are dropped; admin changes are not (one made before the range
// may still be in force). At the start (warmup before the first
// decision), after the admin changes before it, the enrolments of trusts
// in force then are seeded (seedTrust).
func merge(r *Replayer, dch, rch <-chan []event, audits, trusts []event, warmup int64) {
	var da, ra []event
	dOpen, rOpen := true, true
	start := int64(-1)
	for {
		if len(da) == 0 && dOpen {
			da, dOpen = <-dch
		}
		if len(ra) == 0 && rOpen {
			ra, rOpen = <-rch
		}
		if len(da) == 0 && len(ra) == 0 {
			if !dOpen && !rOpen {
				return
			}
			continue
		}
		if start < 0 {
			if len(da) == 0 {
				for range rch { // no decisions: nothing to compare
				}
				return
			}
			start = da[0].ns - warmup
			audits = r.audits(audits, start-1)
			r.seedTrust(trusts, start)
		}
		for len(ra) > 0 && ra[0].ns < start {
			ra = ra[1:]
		}
		// Replay decisions while they come first: the common case.
		for len(da) > 0 && (len(ra) == 0 && !rOpen || len(ra) > 0 && before(&da[0], &ra[0])) {
			if len(da) > 1 {
				r.prefetch(da[1].d)
			}
			if len(audits) > 0 && audits[0].ns <= da[0].ns {
				audits = r.audits(audits, da[0].ns)
			}
			r.streamTime(da[0].at)
			r.Decision(da[0].d)
			da = da[1:]
		}
		if len(ra) > 0 && (len(da) == 0 && !dOpen || len(da) > 0 && !before(&da[0], &ra[0])) {
			if len(audits) > 0 && audits[0].ns <= ra[0].ns {
				audits = r.audits(audits, ra[0].ns)
			}
			r.streamTime(ra[0].at)
			r.Report(ra[0].r)
			ra = ra[1:]
		}
	}
}

// audits applies the admin changes of evs made at or before ns and
// returns the rest.
func (r *Replayer) audits(evs []event, ns int64) []event {
	for len(evs) > 0 && evs[0].ns <= ns {
		r.Audit(evs[0].a)
		evs = evs[1:]
	}
	return evs
}
