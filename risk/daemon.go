// Package risk is the risk daemon's runtime: it consumes decisions and
// reports from JetStream with durable consumers (one subject filter each,
// which nats-server 2.9 honours too), feeds them to the signals engine,
// writes the resulting lockouts and multipliers to the bucket store,
// publishes alerts, and keeps the repeat-offender list. It reads the
// audit stream of admin changes whole: lifted lockouts reset their counts
// and are never re-asserted, and admin multipliers are re-applied when the
// store loses them. A part that fails stops the whole daemon (Run returns
// its error): it never runs half-deaf. cmd/riskd
// runs it alone; the limiter embeds it in the one-process default.
//
// Delivery is at-least-once: riskd acknowledges a message only once its
// actions are written (a failed write is retried), remembers the last
// stream sequence it processed per stream and skips a redelivery at or
// below it. On start it rebuilds the signals' state by replaying each
// stream's recent window up to its durable consumer's ack floor (events
// whose actions were done) with actions suppressed, then consumes from the
// floor with actions, doing what a riskd before it left undone. Under a
// leadership lease (Options.Leading) it acts only while the lease is valid.
package risk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/signals"
	"github.com/tollgate-dev/tollgate/streams"
)

// Options configures a Daemon.
type Options struct {
	// Publisher carries the JetStream context and publishes alerts (required).
	Publisher *streams.Publisher
	// Store receives locks, multipliers and trust (required); the store
	// builds their keys.
	Store Writer
	// Policy returns the policy in force (required).
	Policy func() *policy.Policy
	// Streams names the subjects (must match the limiter's).
	Streams streams.Config
	// Durable is the durable consumers' name prefix (default "riskd").
	Durable string
	// Metrics, when set, records riskd's work.
	Metrics *Metrics
	// Logger (default: discard).
	Logger *slog.Logger
	// OffenderSink, when set, receives the offender list every second
	// (riskd writes it where the limiter's admin API reads it).
	OffenderSink func(ctx context.Context, list []signals.Offender) error
	// Reassert is how often active measures are written again, so a Redis
	// that restarted empty gets them back (default 10s).
	Reassert time.Duration
	// Now is the clock for re-assertion and offenders (default time.Now).
	Now func() time.Time
	// TrustFor is how long an attested device that logged in to an account
	// stays a trusted device of it (exempt from its exempt_attested
	// lockouts, its own bucket of `trusted_devices: own` limits; 7.1).
	// Default: the policy's risk.attestation.trusted_for, else 30 days.
	TrustFor time.Duration
	// MaxKeys bounds the keys each signal tracks (default 200,000: about
	// 100 MB per signal at worst; least recently seen keys go first).
	MaxKeys int
	// StoreLost, when set, reports whether the store lost its data since
	// the last call (a Redis that restarted empty); it is asked every
	// second, and a true answer re-asserts every measure and re-applies
	// every admin multiplier at once (6.5). nil: only the periodic
	// re-assertion.
	StoreLost func(ctx context.Context) (bool, error)
	// MaxTrust bounds the trusted devices remembered for re-assertion
	// (default DefaultMaxTrust; when full, expired ones go first, then the
	// hundredth of the record that ends first, counted in
	// tollgate_riskd_signal_evictions_total{structure="trusts"}, as are
	// the devices of an account past bucket.MaxTrustedDevices, which are
	// not remembered).
	MaxTrust int
	// Trust, when set, is the record of trusted devices the daemon adds
	// to and re-asserts from (riskd: one for the whole process, kept from
	// one leadership to the next); MaxTrust is then its own. nil: one of
	// the daemon's own.
	Trust *TrustRecord
	// TrustScanner, when set, lists the trust sets in the store, read at
	// start into the trust record (scanTrust) so that it holds the
	// enrolments older than the events stream. nil: Store's, if Store
	// implements bucket.TrustScanner (both bucket stores do); neither:
	// the record starts from the events stream alone.
	TrustScanner bucket.TrustScanner
	// MaxAdmin bounds the admin multipliers remembered for re-application
	// (default 100,000; expired ones go first, then the oldest).
	MaxAdmin int
	// Leading, when set, reports whether the daemon may act now (riskd:
	// its leadership lease is valid, Lease.Valid). It is asked before
	// every store write, alert and acknowledgement; once it answers false
	// the daemon acts no more and Run returns ErrNotLeading. nil: always.
	Leading func() bool
	// LeadingUntil, when set with Leading, returns when the daemon's time
	// to act ends (riskd: Lease.Until; zero: it may not act). Every store
	// write runs under a context that ends then, so that a write which has
	// not left by then is never sent: a leader paused between asking
	// Leading and writing, or its Redis client retrying a write that timed
	// out, would otherwise write after another riskd took the lease over
	// (and acted: a lift, a newer lock). nil: writes have no such end.
	LeadingUntil func() time.Time
}

// ErrNotLeading is Run's error when Options.Leading turned false: the
// daemon stopped acting because its leadership may pass to another riskd.
var ErrNotLeading = errors.New("risk: leadership lease no longer valid; stopped acting")

// Defaults of Options.
const (
	// DefaultMaxKeys is Options.MaxKeys when unset.
	DefaultMaxKeys = 200_000
	// DefaultTrustFor is Options.TrustFor when unset: 30 days.
	DefaultTrustFor = 30 * 24 * time.Hour
	// DefaultDurable is Options.Durable when unset.
	DefaultDurable = "riskd"
)

// Daemon is a running risk engine. Use New, then Run.
type Daemon struct {
	o   Options
	js  jetstream.JetStream
	log *slog.Logger

	// mu guards polName and last and serialises apply, so that events
	// reach eng one at a time and in order (signals.Engine's Apply
	// precondition). eng itself is set once in New and is safe for
	// concurrent use: Offenders reads it without mu.
	mu      sync.Mutex
	eng     *signals.Engine
	polName *policy.Policy    // the policy eng was last given; mu held
	last    map[string]uint64 // stream -> last processed sequence; mu held
	// lifts are the admin lifts the replay of reports has yet to apply
	// (readLifts, liftBefore); mu held once Run started.
	lifts []pendingLift

	// auditNext is the audit stream's next unread sequence, where a
	// replaced audit reader starts (tailAudit).
	auditNext atomic.Uint64

	// execMu serialises re-assertion with admin lifts and clears, so a
	// re-assertion never writes back what an admin just removed.
	execMu sync.Mutex
	admins adminRecord  // guarded by execMu
	trusts *trustRecord // the trusted devices in force (7.1): Options.Trust's, or the daemon's own

	// evicted is eng's eviction counts housekeeping last exported.
	evicted signals.Evictions
	// trustEvicted is trusts' eviction count housekeeping last exported.
	trustEvicted uint64
	// journalFails counts the trust journal's failed flushes in a row,
	// journalNext is when housekeeping flushes it again (journalTrust).
	journalFails int
	journalNext  time.Time
	// storeFull counts the writes the store refused as full (execute).
	storeFull atomic.Uint64

	ready    chan struct{}
	readyOne sync.Once
}

// New validates o and returns a Daemon.
func New(o Options) (*Daemon, error) {
	if o.Publisher == nil || o.Store == nil || o.Policy == nil {
		return nil, errors.New("risk: publisher, store and policy are required")
	}
	if o.Durable == "" {
		o.Durable = DefaultDurable
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Reassert <= 0 {
		o.Reassert = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	if o.MaxTrust <= 0 {
		o.MaxTrust = DefaultMaxTrust
	}
	if o.MaxAdmin <= 0 {
		o.MaxAdmin = 100_000
	}
	if o.Streams.Prefix == "" {
		o.Streams.Prefix = streams.DefaultPrefix
	}
	p := o.Policy()
	d := &Daemon{
		o: o, js: o.Publisher.JetStream(), log: o.Logger,
		eng:     signals.New(signals.Options{Risk: p.Risk, Limits: p.Limits, IPv6Prefix: p.Identity.IPv6Prefix, MaxKeys: o.MaxKeys}),
		polName: p,
		last:    map[string]uint64{},
		ready:   make(chan struct{}),
		admins:  adminRecord{max: o.MaxAdmin, m: map[string]adminEntry{}},
	}
	if o.Trust == nil {
		o.Trust = NewTrustRecord(o.MaxTrust)
		d.o.Trust = o.Trust
	}
	d.trusts = &o.Trust.r
	d.trustEvicted = d.trusts.evictions() // counted by the daemons before
	return d, nil
}

// Leading reports whether the daemon may act now (Options.Leading): a
// part that delivers what riskd decides (alerts to a webhook, say) asks it
// before each delivery, so that only the leading riskd delivers.
func (d *Daemon) Leading() bool { return d.o.Leading == nil || d.o.Leading() }

// Ready is closed once the daemon has replayed its state and consumes.
func (d *Daemon) Ready() <-chan struct{} { return d.ready }

// Offenders returns the current repeat offenders, worst first: the
// MaxOffendersListed worst.
func (d *Daemon) Offenders() []signals.Offender {
	list, _ := d.eng.TopOffenders(d.o.Now(), MaxOffendersListed)
	return list
}

// MaxOffendersListed bounds the repeat offenders Offenders returns and
// OffenderSink receives: the worst, worst first (only they are sorted).
// The keys tracked are bounded by MaxKeys (200,000), and an attacker
// rotating device ids, each denied a few times a minute, made the list
// shared through Redis every second about 17 MB of JSON (86 bytes an
// entry); the tollgate_repeat_offenders gauge still counts every
// offender.
const MaxOffendersListed = 1000

// windows returns how far back each stream is replayed on start: far
// enough to see again the events that set every measure still in force,
// so that it is re-asserted into a store that lost it and its rule does
// not fire again while it lasts. A measure set at t lasts until
// t+duration (a velocity rule's escalated duration at most escalate.max)
// and was set by the window's events before t, so a rule needs its window
// plus its longest duration, plus a minute's slack; an escalating rule
// also the 24 h of firings its escalation counts. The repeat offenders
// need a minute, the anomaly rule its long window (its baseline) and its
// duration. A replay that reaches back before a stream's oldest message
// starts at it: the streams' retention (EventsMaxAge, DecisionsMaxAge)
// bounds it.
func windows(p *policy.Policy) (decisions, events time.Duration) {
	const slack = time.Minute
	decisions = time.Minute + slack // repeat offenders: one minute, plus slack
	if a := p.Risk.Anomaly; a != nil {
		decisions = max(decisions, a.LongWindow+a.Duration+slack)
	}
	events = time.Hour
	for _, v := range p.Risk.Velocity {
		longest := v.Duration
		if v.Escalate != nil {
			longest = max(longest, v.Escalate.Max)
			events = max(events, escalateWindow+v.Window+slack) // escalation counts the firings of 24 h
		}
		events = max(events, v.Window+longest+slack)
	}
	return decisions, events
}

// escalateWindow is how far back a velocity rule's escalation counts
// firings (signals).
const escalateWindow = 24 * time.Hour

// source is one durable consumer of riskd: a stream and the one subject
// filter it consumes.
type source struct {
	stream, durable, filter string
	window                  time.Duration
}

// Run consumes until ctx ends. It returns the error of the first part that
// fails (a consumer deleted or closed under it, the audit reader, the
// housekeeping that notices a consumer gone): the other parts are stopped
// with it, so riskd never runs half-deaf. A part that stops while ctx
// lives has failed too.
func (d *Daemon) Run(ctx context.Context) error {
	if err := d.ensureStreams(ctx); err != nil || ctx.Err() != nil {
		return err
	}
	srcs := d.sources()
	if err := d.readLifts(ctx, srcs[1].window); err != nil {
		return err
	}
	cons, err := d.start(ctx, srcs)
	if err != nil {
		return err
	}
	// The audit stream is read whole, then followed: admin multipliers to
	// re-apply, lifted lockouts never to re-assert.
	audit, err := d.auditReader(ctx, 1)
	if err != nil {
		return err
	}
	if err := d.readAudit(ctx, audit, true); err != nil {
		return err
	}
	if err := d.readJournal(ctx); err != nil {
		return err
	}
	if err := d.readTrust(ctx); err != nil {
		return err
	}
	if err := d.scanTrust(ctx); err != nil {
		return err
	}
	d.readyOne.Do(func() { close(d.ready) })
	parts := []part{
		{"audit reader", func(ctx context.Context) error { return d.tailAudit(ctx, audit) }},
		{"housekeeping", func(ctx context.Context) error { return d.housekeeping(ctx, cons, srcs) }},
	}
	for i, c := range cons {
		parts = append(parts, part{"consumer " + srcs[i].durable, func(ctx context.Context) error { return d.consume(ctx, srcs[i], c) }})
	}
	return d.runParts(ctx, parts)
}

// sources are the daemon's durable consumers: one per subject filter,
// with FilterSubject (not FilterSubjects): nats-server 2.9 ignores
// FilterSubjects and would deliver the whole stream (6.7).
func (d *Daemon) sources() []source {
	decWin, evWin := windows(d.o.Policy())
	pfx := d.o.Streams.Prefix
	return []source{
		{d.o.Streams.Stream(streams.DecisionsStream), d.o.Durable + "-decisions", pfx + "decisions.>", decWin},
		{d.o.Streams.Stream(streams.EventsStream), d.o.Durable + "-reports", pfx + "reports.>", evWin},
	}
}

// start gets each source's consumer and replays its recent window up to
// the consumer's ack floor (actions suppressed), so the signals have the
// state a restarted riskd had.
func (d *Daemon) start(ctx context.Context, srcs []source) ([]jetstream.Consumer, error) {
	var cons []jetstream.Consumer
	for _, s := range srcs {
		c, floor, err := d.consumer(ctx, s)
		if err != nil {
			return nil, err
		}
		if floor > 0 {
			n, err := d.replay(ctx, s, floor)
			if err != nil {
				return nil, err
			}
			d.log.Info("replayed state", "stream", s.stream, "messages", n, "up_to_seq", floor)
		}
		d.mu.Lock()
		d.last[s.stream] = floor
		d.mu.Unlock()
		cons = append(cons, c)
	}
	return cons, nil
}

// part is one of the daemon's concurrent parts.
type part struct {
	name string
	run  func(ctx context.Context) error
}

// runParts runs parts until ctx ends. The first part that returns while
// ctx lives (with an error, or nil: it stopped) cancels the others, and
// runParts returns its error once all have returned.
func (d *Daemon) runParts(ctx context.Context, parts []part) error {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := p.run(rctx)
			if rctx.Err() != nil {
				return // stopped with the others
			}
			switch {
			case err == nil:
				err = fmt.Errorf("risk: %s stopped", p.name)
				d.log.Error("consumer failed; riskd stops consuming", "part", p.name, "err", err)
			case errors.Is(err, ErrNotLeading):
				d.log.Warn("leadership no longer valid; riskd stops acting", "part", p.name)
			default:
				d.log.Error("consumer failed; riskd stops consuming", "part", p.name, "err", err)
			}
			cancel(err)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return context.Cause(rctx)
}

// filterOf returns a consumer's single subject filter ("" for none or several).
func filterOf(c jetstream.ConsumerConfig) string {
	switch {
	case c.FilterSubject != "":
		return c.FilterSubject
	case len(c.FilterSubjects) == 1:
		return c.FilterSubjects[0]
	}
	return ""
}

// consumer returns the durable consumer of s and its ack floor (the last
// stream sequence whose actions, and all before it, were done), creating
// it to start at now - window when it does not exist (so a first start
// sees recent history). A consumer whose filter is not s.filter (left by
// an older riskd on a server that ignored its FilterSubjects), or that
// holds what another riskd left undone (held), is recreated at its
// position.
func (d *Daemon) consumer(ctx context.Context, s source) (jetstream.Consumer, uint64, error) {
	cfg := jetstream.ConsumerConfig{
		Durable:       s.durable,
		FilterSubject: s.filter,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 20000,
	}
	var floor uint64
	create := d.js.CreateOrUpdateConsumer
	c, err := d.js.Consumer(ctx, s.stream, s.durable)
	switch {
	case err == nil && filterOf(c.CachedInfo().Config) == s.filter && !held(c.CachedInfo()):
		return c, c.CachedInfo().AckFloor.Stream, nil
	case err == nil:
		info := c.CachedInfo()
		floor = info.AckFloor.Stream
		if filterOf(info.Config) != s.filter {
			d.log.Warn("consumer has the wrong subject filter; recreating it at its position",
				"consumer", s.durable, "filter", filterOf(info.Config), "want", s.filter, "from_seq", info.AckFloor.Stream+1)
		} else {
			d.log.Info("consumer holds events another riskd left undone; recreating it at its ack floor, so they come at once",
				"consumer", s.durable, "ack_pending", info.NumAckPending, "waiting_pulls", info.NumWaiting, "from_seq", info.AckFloor.Stream+1)
		}
		if err := d.js.DeleteConsumer(ctx, s.stream, s.durable); err != nil {
			return nil, 0, fmt.Errorf("risk: delete consumer %s: %w", s.durable, err)
		}
		create = d.recreate // the position lives only in cfg now: do not lose it
		switch {
		case info.AckFloor.Stream > 0:
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, info.AckFloor.Stream+1
		case filterOf(info.Config) == s.filter:
			cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = info.Config.DeliverPolicy, info.Config.OptStartSeq, info.Config.OptStartTime
		default:
			start := d.o.Now().Add(-s.window)
			cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &start
		}
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		start := d.o.Now().Add(-s.window)
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &start
	default:
		return nil, 0, fmt.Errorf("risk: consumer %s: %w", s.durable, err)
	}
	c, err = create(ctx, s.stream, cfg)
	if err != nil {
		return nil, 0, fmt.Errorf("risk: create consumer %s: %w", s.durable, err)
	}
	if got := filterOf(c.CachedInfo().Config); got != s.filter {
		return nil, 0, fmt.Errorf("risk: consumer %s: the server applied filter %q, not %q", s.durable, got, s.filter)
	}
	return c, floor, nil
}

// recreateFor bounds how long recreate retries a consumer's create.
const recreateFor = 30 * time.Second

// recreate creates the consumer riskd has just deleted to move it (its
// filter, or what another riskd left undone), retrying a failed create
// for recreateFor whatever ctx: its position is known only to cfg, and a
// create given up would leave no consumer, so the next start would begin
// at now - window with nothing acted on, redoing what was done and never
// reading what came before the window.
func (d *Daemon) recreate(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recreateFor)
	defer cancel()
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		c, err := d.js.CreateOrUpdateConsumer(ctx, stream, cfg)
		if err == nil {
			return c, nil
		}
		d.log.Warn("recreating a consumer at its position failed; retrying", "consumer", cfg.Durable, "from_seq", cfg.OptStartSeq, "err", err)
		select {
		case <-ctx.Done():
			d.log.Error("consumer not recreated: its position is lost; the next start begins at now - window", "consumer", cfg.Durable, "from_seq", cfg.OptStartSeq)
			return nil, err
		case <-time.After(wait):
		}
	}
}

// held reports whether a consumer holds messages delivered and not
// acknowledged, or pull requests that would take new ones: what a riskd
// that stopped (or lost its leadership) left. They would come again only
// after the consumer's AckWait or the pulls' expiry; a consumer recreated
// at its ack floor delivers them at once.
func held(info *jetstream.ConsumerInfo) bool {
	return info.NumAckPending > 0 || info.NumWaiting > 0
}

// replay feeds messages of the last window up to seq floor into the
// signals engine with actions suppressed: the state a restarted riskd had.
func (d *Daemon) replay(ctx context.Context, s source, floor uint64) (int, error) {
	end, err := d.lastSeq(ctx, s.stream)
	if err != nil {
		return 0, err
	}
	reports := s.filter == d.o.Streams.Prefix+"reports.>"
	defer func() {
		if reports {
			d.lifts = nil // the rest: readAudit's, after the replay
		}
	}()
	return d.readBack(ctx, "replay", s.stream, s.filter, d.o.Now().Add(-s.window), min(end, floor), func(m jetstream.Msg) {
		d.mu.Lock()
		if reports {
			d.liftBefore(m)
		}
		_, _ = d.apply(m, nil)
		d.mu.Unlock()
	})
}

// pendingLift is an admin lift (an audit lockout_lift event) the replay
// of reports applies in its place among them.
type pendingLift struct {
	at          time.Time // its audit message's time (the server's)
	subject, id string
	ts          time.Time // the event's ts
}

// readLifts reads the admin lifts of the last window from the audit
// stream, in order, for the replay of reports to apply where they came
// (liftBefore): a lift applied only after every report was replayed
// would find reports after it counted while the lock it lifted was in
// force for the replay, so that a lock they set after the lift was never
// rebuilt (the rule fired again on the next event, alert and all).
func (d *Daemon) readLifts(ctx context.Context, window time.Duration) error {
	stream := d.o.Streams.Stream(streams.AuditStream)
	end, err := d.lastSeq(ctx, stream)
	if err != nil {
		return err
	}
	_, err = d.readBack(ctx, "replay", stream, d.o.Streams.Prefix+"audit."+streams.AuditLockoutLift, d.o.Now().Add(-window), end, func(m jetstream.Msg) {
		var a streams.Audit
		meta, merr := m.Metadata()
		if merr != nil || json.Unmarshal(m.Data(), &a) != nil || a.TS.IsZero() || a.ID == "" {
			return
		}
		subject := a.Subject
		if subject == "" {
			subject = "account" // audit events of builds before 7.1
		}
		d.lifts = append(d.lifts, pendingLift{at: meta.Timestamp, subject: subject, id: a.ID, ts: a.TS})
	})
	return err
}

// liftBefore applies to the engine the pending lifts stored before m;
// mu held.
func (d *Daemon) liftBefore(m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		return
	}
	for len(d.lifts) > 0 && d.lifts[0].at.Before(meta.Timestamp) {
		l := d.lifts[0]
		d.lifts = d.lifts[1:]
		d.eng.LiftSubjectLock(l.subject, l.id, l.ts)
	}
}

// readBack calls apply on each message of stream for filter from time
// start on, up to seq end, in order, and returns how many it applied.
// It reads until it has seen end, or until the server says nothing is
// left for the filter (and delivered none it did not read); a failed
// fetch is logged, counted under op and retried (ctx bounds it), an empty
// one is never taken for the end (7.5).
func (d *Daemon) readBack(ctx context.Context, op, stream, filter string, start time.Time, end uint64, apply func(jetstream.Msg)) (int, error) {
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &start}
	if filter != "" {
		cfg.FilterSubjects = []string{filter}
	}
	oc, err := d.js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return 0, fmt.Errorf("risk: %s %s: %w", op, stream, err)
	}
	n, failures := 0, 0
	for end > 0 && ctx.Err() == nil {
		got, done, err := readBatch(oc, end, &n, apply)
		if done {
			return n, nil
		}
		if got == 0 && err == nil {
			// Nothing came: the end only if the server has nothing left and
			// delivered nothing to this fetch (each fetch has a consumer of
			// its own). A server that answered after the fetch stopped
			// waiting delivered to a closed subscription: none pending, yet
			// those messages were never read; the next fetch starts again
			// after the last one read.
			info, ierr := oc.Info(ctx)
			switch {
			case ierr == nil && info.NumPending == 0 && info.Delivered.Consumer == 0:
				return n, nil
			case ierr == nil || errors.Is(ierr, jetstream.ErrOrderedConsumerNotCreated):
				_ = sleepCtx(ctx, 20*time.Millisecond)
				continue
			}
			err = ierr
		}
		if err != nil && ctx.Err() == nil {
			failures++
			d.count(op)
			d.log.Warn(op+" fetch failed; retrying (riskd acts only once its state is rebuilt)",
				"stream", stream, "read", n, "up_to_seq", end, "failures", failures, "err", err)
			_ = sleepCtx(ctx, min(time.Duration(failures)*100*time.Millisecond, time.Second))
		}
	}
	if ctx.Err() != nil {
		return n, fmt.Errorf("risk: %s %s: %w", op, stream, ctx.Err())
	}
	return n, nil
}

// readBatch fetches what the server has ready of oc and applies each
// message up to seq end, counting them in n. done: end, or the last
// message for the filter, was reached. A fetch that found nothing is
// got 0 with a nil error.
func readBatch(oc jetstream.Consumer, end uint64, n *int, apply func(jetstream.Msg)) (got int, done bool, err error) {
	batch, err := oc.FetchNoWait(500)
	if err != nil {
		return 0, false, err
	}
	for m := range batch.Messages() { // drained whole: the next Fetch needs it done
		got++
		meta, merr := m.Metadata()
		if done || merr != nil || meta.Sequence.Stream > end {
			done = done || merr == nil
			continue
		}
		apply(m)
		*n++
		done = meta.Sequence.Stream >= end || meta.NumPending == 0
	}
	err = batch.Error()
	if errors.Is(err, jetstream.ErrNoMessages) {
		err = nil
	}
	return got, done, err
}

// lastSeq is the stream's last sequence now, asked until it answers
// (failures logged) or ctx ends.
func (d *Daemon) lastSeq(ctx context.Context, stream string) (uint64, error) {
	for failures := 1; ; failures++ {
		st, err := d.js.Stream(ctx, stream)
		if err == nil {
			return st.CachedInfo().State.LastSeq, nil
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("risk: replay %s: %w", stream, ctx.Err())
		}
		d.count("replay")
		d.log.Warn("replay: stream info failed; retrying", "stream", stream, "failures", failures, "err", err)
		if err := sleepCtx(ctx, min(time.Duration(failures)*100*time.Millisecond, time.Second)); err != nil {
			return 0, fmt.Errorf("risk: replay %s: %w", stream, err)
		}
	}
}

// sleepCtx waits d or until ctx ends (then it returns ctx's error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// pullExpiry is how long one pull request of consume lives.
const pullExpiry = 5 * time.Second

// consume processes the durable consumer's messages until ctx ends, one
// at a time and in order: it applies a message, does its store actions
// and sends its alerts, and a settler acknowledges it, in order, only
// once its alerts are stored too (execute retries what failed), so the
// consumer's ack floor is always an event whose actions, and all before
// it, took effect. It returns an error when the consumer can no longer
// deliver (deleted, refused, its iterator closed under it): riskd must
// not go on without it; and ErrNotLeading, without acknowledging, once
// the daemon may no longer act.
func (d *Daemon) consume(ctx context.Context, s source, c jetstream.Consumer) error {
	stream := s.stream
	// A pull that lives 5 s is heartbeaten every 2.5 s, so a consumer whose
	// NATS node died is noticed and pulled from its new leader within
	// seconds (the library's 30 s default took about 29 s, 7.6).
	it, err := c.Messages(jetstream.PullMaxMessages(1000), jetstream.PullExpiry(pullExpiry))
	if err != nil {
		return fmt.Errorf("risk: consume %s: %w", s.durable, err)
	}
	defer it.Stop()
	defer context.AfterFunc(ctx, it.Stop)()
	set := d.newSettler(ctx)
	// what it could not settle stays unacknowledged, the next leader's
	defer func() { _ = set.stop() }()
	var actions []signals.Action
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
				errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrBadRequest) {
				d.count("consume")
				return fmt.Errorf("risk: consumer %s: %w", s.durable, err)
			}
			d.count("consume")
			d.log.Warn("consume", "stream", stream, "consumer", s.durable, "err", err)
			continue
		}
		if !d.Leading() {
			return ErrNotLeading
		}
		meta, err := m.Metadata()
		if err != nil {
			_ = m.Ack()
			continue
		}
		d.mu.Lock()
		if meta.Sequence.Stream <= d.last[stream] {
			// a redelivery of what this daemon has done and acknowledged
			d.mu.Unlock()
			if d.o.Metrics != nil {
				d.o.Metrics.Skipped.Inc()
			}
			_ = m.Ack()
			continue
		}
		var got applied
		actions, got = d.apply(m, actions[:0])
		d.last[stream] = meta.Sequence.Stream
		d.mu.Unlock()
		p, err := d.send(set, m, actions)
		if err == nil {
			err = set.add(p)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		d.countApplied(got)
	}
}

// finishGrace bounds how long the messages in flight when the run ends
// still have their actions done and are settled; finishPoll is how often
// the daemon asks meanwhile whether it may still act.
const (
	finishGrace = 5 * time.Second
	finishPoll  = 20 * time.Millisecond
)

// send does m's store actions, in order, and publishes its alerts without
// waiting for their acks, returning m for set to settle. The actions run
// under set's context, which outlives the consume's end by its grace: a
// message cut short midway (a lock written, its alert not sent) would be
// acted on again by the riskd after this one.
func (d *Daemon) send(set *settler, m jetstream.Msg, actions []signals.Action) (*inflight, error) {
	p := &inflight{m: m, acted: len(actions) > 0}
	for i := range actions {
		a := &actions[i]
		if a.Kind != signals.Alert {
			progress := func() { _ = m.InProgress(); set.progress() }
			if err := d.execute(set.ctx, progress, actions[i:i+1]); err != nil {
				return nil, err
			}
			continue
		}
		if !d.Leading() {
			return nil, ErrNotLeading
		}
		f, err := d.o.Publisher.AlertAsync(&a.Alert)
		if err != nil {
			// settled by publishing it again, with retries
			d.count("alert")
		}
		p.sent = append(p.sent, sentAlert{a: *a, f: f})
	}
	return p, nil
}

// ackWait bounds how long a message whose actions were done waits for
// the server to confirm its acknowledgement.
const ackWait = 2 * time.Second

// ackDone acknowledges a message once its actions are done. One that
// acted (a lock written, an alert sent) waits for the server's
// confirmation, within ackWait and past a cancelled run: a riskd that stops
// or hands over leadership just after acting must not leave the message to
// be redelivered to its successor, which would act, and alert, again.
// The rest (most messages act on nothing) are acknowledged without waiting.
func ackDone(m jetstream.Msg, acted bool) {
	if !acted {
		_ = m.Ack()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ackWait)
	defer cancel()
	_ = m.DoubleAck(ctx)
}

// applied is what one message held: n events of type typ ("decision" or
// "report"), and a report's own type (its event type, "" for decisions).
type applied struct {
	n               int
	typ, reportType string
}

// countApplied counts a processed message's events in the metrics, a
// report by its type's label (policy.EventLabel: bounded by the policy).
func (d *Daemon) countApplied(a applied) {
	m := d.o.Metrics
	if m == nil || a.n == 0 {
		return
	}
	m.Events.WithLabelValues(a.typ).Add(float64(a.n))
	if a.reportType != "" {
		m.Reports.WithLabelValues(d.o.Policy().EventLabel(a.reportType)).Inc()
	}
}

// apply decodes one message and runs its events through the engine,
// returning the actions and what the message held; a message on any
// other subject is counted as an error (op "subject") and ignored. mu
// held.
func (d *Daemon) apply(m jetstream.Msg, out []signals.Action) ([]signals.Action, applied) {
	d.refreshPolicy()
	// the stream's own time bounds how far the message's events move the
	// engine's clock (a host whose clock runs ahead sweeps nothing early);
	// the message's timestamp keeps a replay the same as the first run
	streamTime := d.o.Now()
	if meta, err := m.Metadata(); err == nil && !meta.Timestamp.IsZero() {
		streamTime = meta.Timestamp
	}
	d.eng.BoundClock(streamTime)
	subj := m.Subject()
	pfx := d.o.Streams.Prefix
	rest, ok := strings.CutPrefix(subj, pfx)
	switch {
	case ok && strings.HasPrefix(rest, "decisions."):
		var b streams.DecisionBatch
		if err := streams.DecodeDecisionBatch(m.Data(), &b); err != nil {
			d.count("decode")
			return out, applied{}
		}
		for i := range b.Decisions {
			// one account however spelled (6.4), whichever limiter published it
			b.Decisions[i].Account = policy.NormalizeAccount(b.Decisions[i].Account)
			out = d.eng.ApplyDecision(0, 0, &b.Decisions[i], out)
		}
		return out, applied{n: len(b.Decisions), typ: "decision"}
	case ok && strings.HasPrefix(rest, "reports."):
		var r streams.Report
		if err := json.Unmarshal(m.Data(), &r); err != nil {
			d.count("decode")
			return out, applied{}
		}
		r.Account = policy.NormalizeAccount(r.Account)
		out = d.eng.ApplyReport(0, 0, &r, out)
		out = d.recordTrust(TrustAction(&r, d.trustFor(), out), len(out), &r)
		return out, applied{n: 1, typ: "report", reportType: r.Type}
	}
	d.count("subject")
	d.log.Warn("message on a subject riskd did not ask for; ignored", "subject", subj)
	return out, applied{}
}

// ActionTrust is riskd's own action: add Lock.Rule (a device id) to the
// account's trust set until Lock.Until.
const ActionTrust signals.ActionKind = 200

// TrustAction appends to out the ActionTrust a report causes, if any: a
// device that proved its attestation (device token) and logged in to the
// account is exempt from the account's lockouts of rules with
// exempt_attested for trustFor.
func TrustAction(r *streams.Report, trustFor time.Duration, out []signals.Action) []signals.Action {
	if r.Type == streams.ReportLoginSucceeded && r.Attested && r.Account != "" && r.DeviceID != "" {
		out = append(out, signals.Action{Kind: ActionTrust, Subject: "account", ID: r.Account,
			Lock: bucket.Lock{Rule: r.DeviceID, Until: r.TS.Add(trustFor)}})
	}
	return out
}

// TrustFor returns how long p keeps a device trusted:
// risk.attestation.trusted_for, else DefaultTrustFor.
func TrustFor(p *policy.Policy) time.Duration {
	if a := p.Risk.Attestation; a != nil && a.TrustedFor > 0 {
		return a.TrustedFor
	}
	return DefaultTrustFor
}

// refreshPolicy hands a reloaded policy to the engine; mu held.
func (d *Daemon) refreshPolicy() {
	if p := d.o.Policy(); p != d.polName {
		d.eng.SetPolicy(signals.Options{Risk: p.Risk, Limits: p.Limits, IPv6Prefix: p.Identity.IPv6Prefix, MaxKeys: d.o.MaxKeys})
		d.polName = p
	}
}

// Bounds of execute's retries of a failed action.
const (
	retryFirst = 50 * time.Millisecond
	retryMax   = 500 * time.Millisecond
	// progressEvery is how often a message whose actions are being retried
	// is marked in progress, so JetStream does not redeliver it meanwhile.
	progressEvery = 5 * time.Second
)

// execute applies m's actions to the store and publishes their alerts, in
// order, retrying a failed one until it succeeds: a stalled store holds
// the consumer (the events wait in the stream) rather than lose a measure.
// It returns nil once all are done, ErrNotLeading (not all done) once the
// daemon may no longer act, and ctx's error when ctx ends first.
func (d *Daemon) execute(ctx context.Context, progress func(), actions []signals.Action) error {
	for i := range actions {
		a := &actions[i]
		wait, marked := retryFirst, time.Now()
		for attempt := 1; ; attempt++ {
			err := d.doAction(ctx, a)
			if err == nil {
				if attempt > 1 {
					d.log.Info("action done after retries", "kind", a.Kind, "subject", a.Subject, "id", a.ID, "attempts", attempt)
				}
				break
			}
			if errors.Is(err, ErrNotLeading) || ctx.Err() != nil {
				return errors.Join(err, ctx.Err())
			}
			if errors.Is(err, bucket.ErrFull) {
				// The memory store holds its bound of locks or multipliers
				// and refuses more rather than evict one in force; it frees
				// room only as they expire. Retrying would hold every later
				// event behind this one for as long, so the write is given
				// up, counted and logged (the first and every 100th).
				d.count("store_full")
				if n := d.storeFull.Add(1); n == 1 || n%100 == 0 {
					d.log.Warn("the memory store is full: measure not written (size it with --memory-max-keys)",
						"kind", a.Kind, "subject", a.Subject, "id", a.ID, "refused", n, "err", err)
				}
				break
			}
			if attempt == 1 || attempt%20 == 0 {
				d.log.Warn("action failed; retrying (the event is not acknowledged until it succeeds)",
					"kind", a.Kind, "subject", a.Subject, "id", a.ID, "attempts", attempt, "err", err)
			}
			if progress != nil && time.Since(marked) >= progressEvery {
				progress()
				marked = time.Now()
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
			wait = min(2*wait, retryMax)
		}
	}
	return nil
}

// leadCtx returns ctx ending also when the daemon's time to act does
// (Options.LeadingUntil): a store write under it is never sent after
// another riskd may have taken over. Call it after asking Leading.
func (d *Daemon) leadCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if d.o.Leading == nil || d.o.LeadingUntil == nil {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, d.o.LeadingUntil())
}

// doAction applies one action of an event. An enrolment (ActionTrust)
// is written under execMu, and only while the record still holds it, as
// reassertOne writes: a revocation of the audit stream (revokeTrust)
// either comes after the write and takes it out of the store again, or
// before it and the write is skipped. Otherwise a write in flight (a slow
// or reconnecting store, retried) landed after the revocation had
// untrusted the device, and the revoked device stayed trusted.
func (d *Daemon) doAction(ctx context.Context, a *signals.Action) error {
	if a.Kind != ActionTrust {
		return d.do(ctx, a)
	}
	d.execMu.Lock()
	defer d.execMu.Unlock()
	if !d.trusts.holds(a.ID, a.Lock.Rule, a.Lock.Until) {
		return nil
	}
	return d.do(ctx, a)
}

// do applies one action.
func (d *Daemon) do(ctx context.Context, a *signals.Action) error {
	if !d.Leading() {
		return ErrNotLeading
	}
	ctx, cancel := d.leadCtx(ctx)
	defer cancel()
	m := d.o.Metrics
	if a.Kind == signals.Alert {
		if err := d.o.Publisher.Alert(ctx, &a.Alert); err != nil {
			d.count("alert")
			return err
		}
		d.alerted(&a.Alert)
		return nil
	}
	if err := WriteAction(ctx, d.o.Store, d.o.Policy(), a); err != nil {
		d.count("store")
		return err
	}
	if m != nil {
		switch a.Kind {
		case signals.SetLock, signals.ClearLock:
			m.Locks.Inc()
		case signals.SetMultiplier:
			m.Multipliers.Inc()
		}
	}
	return nil
}

// alerted counts and logs an alert JetStream has stored.
func (d *Daemon) alerted(a *streams.Alert) {
	if m := d.o.Metrics; m != nil {
		if a.Shadow {
			m.ShadowAlerts.WithLabelValues(a.Kind, a.Rule).Inc()
		} else {
			m.Alerts.WithLabelValues(a.Kind).Inc()
			if velocityKind(a.Kind) {
				m.Actions.WithLabelValues(a.Kind, a.Rule).Inc()
			}
		}
	}
	d.log.Info("alert", "kind", a.Kind, "subject", a.Subject, "id", a.SubjectID, "rule", a.Rule, "shadow", a.Shadow, "reason", a.Reason)
}

// velocityKind reports whether an alert kind is a velocity rule's measure
// (lockout, step_up, tighten, block).
func velocityKind(kind string) bool {
	switch kind {
	case streams.AlertLockout, streams.AlertStepUp, streams.AlertTighten, streams.AlertBlock:
		return true
	}
	return false
}

// ActionWriter is what WriteAction writes to: a bucket store's
// subject-level locks, multipliers and trust (bucket.Admin).
type ActionWriter interface {
	SetLock(ctx context.Context, s bucket.Subject, l bucket.Lock) error
	ClearLock(ctx context.Context, s bucket.Subject) (bool, error)
	ClearRuleLock(ctx context.Context, s bucket.Subject, rule string) (bool, error)
	SetMultiplier(ctx context.Context, s bucket.Subject, m bucket.Multiplier) error
	Trust(ctx context.Context, s bucket.Subject, device string, until time.Time) error
}

// Writer is what the daemon writes to: WriteAction's methods, and
// ClearMultiplier, Untrust and UntrustDevice for admin audit events.
type Writer interface {
	ActionWriter
	ClearMultiplier(ctx context.Context, s bucket.Subject, source string) error
	Untrust(ctx context.Context, s bucket.Subject, device string) (bool, error)
	UntrustDevice(ctx context.Context, device string) (int, error)
}

// WriteAction applies a lock, multiplier or trust action (SetLock,
// ClearLock, SetMultiplier, ActionTrust) to store, as riskd does; a lock
// of a rule with exempt_attested in p is marked Exempt. Alerts and other
// kinds are ignored. `limiter replay` runs it too.
func WriteAction(ctx context.Context, store ActionWriter, p *policy.Policy, a *signals.Action) error {
	sub := bucket.Subject{Kind: a.Subject, ID: a.ID}
	switch a.Kind {
	case ActionTrust:
		return store.Trust(ctx, sub, a.Lock.Rule, a.Lock.Until)
	case signals.SetLock:
		for _, v := range p.Risk.Velocity {
			if v.Name == a.Lock.Rule && v.ExemptAttested {
				a.Lock.Exempt = true
			}
		}
		// a.Lock.Own (a class-restricted rule): the rule's own key, so
		// that it never replaces another class's lock
		return store.SetLock(ctx, sub, a.Lock)
	case signals.ClearLock:
		// only the lock the action names (a step-up passed): the subject's
		// lock key, or a class-restricted rule's own
		rule := ""
		if a.Lock.Own {
			rule = a.Lock.Rule
		}
		_, err := store.ClearRuleLock(ctx, sub, rule)
		return err
	case signals.SetMultiplier:
		if sub.Kind == "ip" {
			// where the engine looks it up: an IPv6 client's prefix (7.1)
			sub.ID = engine.IPKey(p, sub.ID, netip.Addr{})
		}
		return store.SetMultiplier(ctx, sub, a.Multiplier)
	}
	return nil
}

func (d *Daemon) count(op string) {
	if d.o.Metrics != nil {
		d.o.Metrics.Errors.WithLabelValues(op).Inc()
	}
}

// housekeeping publishes offenders every second, re-asserts active
// measures and samples consumer lag.
// It returns an error when a consumer no longer exists on the server (a
// deleted consumer need not wake its message iterator).
func (d *Daemon) housekeeping(ctx context.Context, cons []jetstream.Consumer, srcs []source) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastReassert := d.o.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if !d.Leading() {
			return ErrNotLeading
		}
		now := d.o.Now()
		// only the listed worst are sorted, under the engine's lock that
		// event consumption waits for; the gauge gets every offender
		list, perLimit := d.eng.TopOffenders(now, MaxOffendersListed)
		m := d.o.Metrics
		if m != nil {
			m.Offenders.Reset()
			for limit, n := range perLimit {
				m.Offenders.WithLabelValues(limit).Set(float64(n))
			}
			m.observeSignals(d.eng.Stats(), &d.evicted)
			if n := d.trusts.evictions(); n > d.trustEvicted {
				m.SignalEvictions.WithLabelValues("trusts").Add(float64(n - d.trustEvicted))
				d.trustEvicted = n
			}
		}
		for i, c := range cons {
			info, err := c.Info(ctx)
			switch {
			case errors.Is(err, jetstream.ErrConsumerNotFound):
				d.count("consume")
				return fmt.Errorf("risk: consumer %s: %w", srcs[i].durable, err)
			case err == nil && m != nil:
				m.Lag.WithLabelValues(srcs[i].stream).Set(float64(info.NumPending))
			}
		}
		d.journalTrust(ctx)
		if d.o.OffenderSink != nil && d.Leading() {
			sctx, cancel := d.leadCtx(ctx)
			if err := d.o.OffenderSink(sctx, list); err != nil {
				d.count("store")
			}
			cancel()
		}
		lost := false
		if d.o.StoreLost != nil {
			l, err := d.o.StoreLost(ctx)
			if err == nil && l {
				d.log.Warn("the store lost its data (Redis restarted empty?); re-asserting measures, admin multipliers and trusted devices")
				lost = true
			}
		}
		if lost || now.Sub(lastReassert) >= d.o.Reassert {
			lastReassert = now
			if err := d.reassert(ctx, now); err != nil {
				return err
			}
			if lost || d.o.StoreLost == nil {
				// trust sets can be many: written back when the store lost
				// them, not at every re-assertion (unless nothing tells)
				if err := d.reassertTrust(ctx, now); err != nil {
					return err
				}
			}
		}
	}
}

// ensureStreams creates or updates the streams, trying again every second
// while the NATS server does not answer in time: on a new JetStream
// cluster, limiters and riskd starting together all create the replicated
// streams at once, and some of those requests time out while the cluster
// places them (7.6). Only ctx's end gives up.
func (d *Daemon) ensureStreams(ctx context.Context) error {
	for {
		err := streams.EnsureStreams(ctx, d.js, d.o.Streams)
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			return err
		}
		d.count("streams")
		d.log.Warn("streams not ensured yet; trying again", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}
