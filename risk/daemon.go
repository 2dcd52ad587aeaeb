// Package risk is the risk daemon's runtime: it consumes decisions and
// reports from JetStream with durable consumers, feeds them to the signals
// engine, writes the resulting lockouts and multipliers to the bucket
// store, publishes alerts, and keeps the repeat-offender list. cmd/riskd
// runs it alone; the limiter embeds it in the one-process default.
//
// Delivery is at-least-once; the effect is exactly-once: riskd remembers
// the last stream sequence it processed per stream and skips anything at
// or below it, and on start it rebuilds the signals' state by replaying
// each stream's recent window up to its durable consumer's ack floor,
// with actions suppressed, before it consumes new messages.
package risk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/signals"
	"github.com/tollgate-dev/tollgate/streams"
)

// Options configures a Daemon.
type Options struct {
	// Publisher carries the JetStream context and publishes alerts (required).
	Publisher *streams.Publisher
	// Store receives locks and multipliers (required).
	Store bucket.Admin
	// Policy returns the policy in force (required).
	Policy func() *policy.Policy
	// Prefix is the store's key prefix (default "tg:").
	Prefix string
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
	// stays exempt from that account's exempt_attested lockouts (default 30 days).
	TrustFor time.Duration
	// MaxKeys bounds the keys each signal tracks (default 200,000: about
	// 100 MB per signal at worst; least recently seen keys go first).
	MaxKeys int
}

// Daemon is a running risk engine. Use New, then Run.
type Daemon struct {
	o   Options
	js  jetstream.JetStream
	log *slog.Logger

	mu      sync.Mutex // guards eng and last
	eng     *signals.Engine
	polName *policy.Policy
	last    map[string]uint64 // stream -> last processed sequence

	ready    chan struct{}
	readyOne sync.Once
}

// New validates o and returns a Daemon.
func New(o Options) (*Daemon, error) {
	if o.Publisher == nil || o.Store == nil || o.Policy == nil {
		return nil, errors.New("risk: publisher, store and policy are required")
	}
	if o.Prefix == "" {
		o.Prefix = "tg:"
	}
	if o.Durable == "" {
		o.Durable = "riskd"
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
		o.MaxKeys = 200_000
	}
	if o.TrustFor <= 0 {
		o.TrustFor = 30 * 24 * time.Hour
	}
	if o.Streams.Prefix == "" {
		o.Streams.Prefix = streams.DefaultPrefix
	}
	p := o.Policy()
	d := &Daemon{
		o: o, js: o.Publisher.JetStream(), log: o.Logger,
		eng:     signals.New(signals.Options{Risk: p.Risk, Limits: p.Limits, MaxKeys: o.MaxKeys}),
		polName: p,
		last:    map[string]uint64{},
		ready:   make(chan struct{}),
	}
	return d, nil
}

// Ready is closed once the daemon has replayed its state and consumes.
func (d *Daemon) Ready() <-chan struct{} { return d.ready }

// Offenders returns the current repeat offenders, worst first.
func (d *Daemon) Offenders() []signals.Offender {
	return d.eng.Offenders(d.o.Now())
}

// windows returns how far back each stream is replayed on start.
func windows(p *policy.Policy) (decisions, events time.Duration) {
	decisions = 2 * time.Minute // repeat offenders: one minute, plus slack
	if a := p.Risk.Anomaly; a != nil && a.LongWindow+time.Minute > decisions {
		decisions = a.LongWindow + time.Minute
	}
	events = time.Hour
	for _, v := range p.Risk.Velocity {
		w := v.Window + time.Minute
		if v.Escalate != nil {
			w = 25 * time.Hour // escalation looks back 24 h
		}
		if w > events {
			events = w
		}
	}
	return decisions, events
}

// Run consumes until ctx ends.
func (d *Daemon) Run(ctx context.Context) error {
	if err := streams.EnsureStreams(ctx, d.js, d.o.Streams); err != nil {
		return err
	}
	decWin, evWin := windows(d.o.Policy())
	type src struct {
		stream, durable string
		filters         []string
		window          time.Duration
	}
	pfx := d.o.Streams.Prefix
	srcs := []src{
		{d.o.Streams.Stream(streams.DecisionsStream), d.o.Durable + "-decisions", []string{pfx + "decisions.>"}, decWin},
		{d.o.Streams.Stream(streams.EventsStream), d.o.Durable + "-reports", []string{pfx + "reports.>"}, evWin},
	}
	var cons []jetstream.Consumer
	for _, s := range srcs {
		c, err := d.consumer(ctx, s.stream, s.durable, s.filters, s.window)
		if err != nil {
			return err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return fmt.Errorf("risk: consumer info %s: %w", s.durable, err)
		}
		if floor := info.AckFloor.Stream; floor > 0 {
			n, err := d.replay(ctx, s.stream, s.filters, s.window, floor)
			if err != nil {
				return err
			}
			d.log.Info("replayed state", "stream", s.stream, "messages", n, "up_to_seq", floor)
		}
		d.mu.Lock()
		d.last[s.stream] = info.AckFloor.Stream
		d.mu.Unlock()
		cons = append(cons, c)
	}
	d.readyOne.Do(func() { close(d.ready) })

	var wg sync.WaitGroup
	errs := make(chan error, len(cons))
	for i, c := range cons {
		wg.Add(1)
		go func(stream string, c jetstream.Consumer) {
			defer wg.Done()
			if err := d.consume(ctx, stream, c); err != nil {
				errs <- err
			}
		}(srcs[i].stream, c)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.housekeeping(ctx, cons, srcs[0].stream, srcs[1].stream)
	}()
	wg.Wait()
	close(errs)
	return <-errs
}

// consumer returns the durable consumer, creating it to start at now -
// window when it does not exist (so a first start sees recent history).
func (d *Daemon) consumer(ctx context.Context, stream, durable string, filters []string, window time.Duration) (jetstream.Consumer, error) {
	c, err := d.js.Consumer(ctx, stream, durable)
	if err == nil {
		return c, nil
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("risk: consumer %s: %w", durable, err)
	}
	start := d.o.Now().Add(-window)
	c, err = d.js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:        durable,
		FilterSubjects: filters,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        30 * time.Second,
		MaxAckPending:  20000,
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &start,
	})
	if err != nil {
		return nil, fmt.Errorf("risk: create consumer %s: %w", durable, err)
	}
	return c, nil
}

// replay feeds messages of the last window up to seq floor into the
// signals engine with actions suppressed: the state a restarted riskd had.
func (d *Daemon) replay(ctx context.Context, stream string, filters []string, window time.Duration, floor uint64) (int, error) {
	start := d.o.Now().Add(-window)
	oc, err := d.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: filters, DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &start,
	})
	if err != nil {
		return 0, fmt.Errorf("risk: replay %s: %w", stream, err)
	}
	n := 0
	for {
		batch, err := oc.Fetch(500, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return n, fmt.Errorf("risk: replay %s: %w", stream, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				continue
			}
			if meta.Sequence.Stream > floor {
				return n, nil
			}
			d.mu.Lock()
			_, _ = d.apply(m, nil)
			d.mu.Unlock()
			n++
			if meta.Sequence.Stream == floor {
				return n, nil
			}
		}
		if got == 0 {
			return n, nil // the window holds nothing past what we read
		}
	}
}

// consume processes the durable consumer's messages until ctx ends.
func (d *Daemon) consume(ctx context.Context, stream string, c jetstream.Consumer) error {
	it, err := c.Messages(jetstream.PullMaxMessages(1000))
	if err != nil {
		return fmt.Errorf("risk: consume %s: %w", stream, err)
	}
	go func() {
		<-ctx.Done()
		it.Stop()
	}()
	var actions []signals.Action
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			d.count("consume")
			d.log.Warn("consume", "stream", stream, "err", err)
			continue
		}
		meta, err := m.Metadata()
		if err != nil {
			_ = m.Ack()
			continue
		}
		d.mu.Lock()
		if meta.Sequence.Stream <= d.last[stream] {
			d.mu.Unlock()
			if d.o.Metrics != nil {
				d.o.Metrics.Skipped.Inc()
			}
			_ = m.Ack()
			continue
		}
		var n int
		actions, n = d.apply(m, actions[:0])
		d.last[stream] = meta.Sequence.Stream
		d.mu.Unlock()
		d.execute(ctx, actions)
		_ = m.Ack()
		if d.o.Metrics != nil && n > 0 {
			typ := "report"
			if m.Subject()[len(d.o.Streams.Prefix):][0] == 'd' {
				typ = "decision"
			}
			d.o.Metrics.Events.WithLabelValues(typ).Add(float64(n))
		}
	}
}

// apply decodes one message and runs its events through the engine,
// returning the actions and the number of events; mu held.
func (d *Daemon) apply(m jetstream.Msg, out []signals.Action) ([]signals.Action, int) {
	d.refreshPolicy()
	subj := m.Subject()
	pfx := d.o.Streams.Prefix
	switch {
	case len(subj) > len(pfx)+10 && subj[len(pfx):len(pfx)+10] == "decisions.":
		var b streams.DecisionBatch
		if err := streams.DecodeDecisionBatch(m.Data(), &b); err != nil {
			d.count("decode")
			return out, 0
		}
		for i := range b.Decisions {
			// one account however spelled (6.4), whichever limiter published it
			b.Decisions[i].Account = policy.NormalizeAccount(b.Decisions[i].Account)
			out = d.eng.ApplyDecision(0, 0, &b.Decisions[i], out)
		}
		return out, len(b.Decisions)
	default:
		var r streams.Report
		if err := json.Unmarshal(m.Data(), &r); err != nil {
			d.count("decode")
			return out, 0
		}
		r.Account = policy.NormalizeAccount(r.Account)
		out = d.eng.ApplyReport(0, 0, &r, out)
		if r.Type == streams.ReportLoginSucceeded && r.Attested && r.Account != "" && r.DeviceID != "" {
			// an attested device that logged in to the account: exempt from
			// the account's lockouts of rules with exempt_attested
			out = append(out, signals.Action{Kind: actionTrust, Subject: "account", ID: r.Account,
				Lock: bucket.Lock{Rule: r.DeviceID, Until: r.TS.Add(d.o.TrustFor)}})
		}
		return out, 1
	}
}

// actionTrust is riskd's own action: add Lock.Rule (a device id) to the
// account's trust set until Lock.Until.
const actionTrust signals.ActionKind = 200

// refreshPolicy hands a reloaded policy to the engine; mu held.
func (d *Daemon) refreshPolicy() {
	if p := d.o.Policy(); p != d.polName {
		d.eng.SetPolicy(signals.Options{Risk: p.Risk, Limits: p.Limits, MaxKeys: d.o.MaxKeys})
		d.polName = p
	}
}

// execute applies actions to the store and publishes alerts, retrying a
// failed store write briefly; what still fails is re-asserted later.
func (d *Daemon) execute(ctx context.Context, actions []signals.Action) {
	for i := range actions {
		a := &actions[i]
		var err error
		for attempt := 0; attempt < 3; attempt++ {
			if err = d.do(ctx, a); err == nil || ctx.Err() != nil {
				break
			}
			time.Sleep(time.Duration(50<<attempt) * time.Millisecond)
		}
		if err != nil {
			d.log.Warn("action failed; re-asserted later", "kind", a.Kind, "subject", a.Subject, "err", err)
		}
	}
}

// do applies one action.
func (d *Daemon) do(ctx context.Context, a *signals.Action) error {
	m := d.o.Metrics
	switch a.Kind {
	case actionTrust:
		if err := d.o.Store.Trust(ctx, bucket.TrustKey(d.o.Prefix, a.Subject, a.ID), a.Lock.Rule, a.Lock.Until); err != nil {
			d.count("store")
			return err
		}
	case signals.SetLock:
		for _, v := range d.o.Policy().Risk.Velocity {
			if v.Name == a.Lock.Rule && v.ExemptAttested {
				a.Lock.Exempt = true
			}
		}
		if err := d.o.Store.SetLock(ctx, bucket.LockKey(d.o.Prefix, a.Subject, a.ID), a.Lock); err != nil {
			d.count("store")
			return err
		}
		if m != nil {
			m.Locks.Inc()
		}
	case signals.ClearLock:
		if _, err := d.o.Store.ClearLock(ctx, bucket.LockKey(d.o.Prefix, a.Subject, a.ID)); err != nil {
			d.count("store")
			return err
		}
		if m != nil {
			m.Locks.Inc()
		}
	case signals.SetMultiplier:
		if err := d.o.Store.SetMultiplier(ctx, bucket.MultiplierKey(d.o.Prefix, a.Subject, a.ID), a.Multiplier); err != nil {
			d.count("store")
			return err
		}
		if m != nil {
			m.Multipliers.Inc()
		}
	case signals.Alert:
		if err := d.o.Publisher.Alert(ctx, &a.Alert); err != nil {
			d.count("alert")
			return err
		}
		if m != nil {
			m.Alerts.WithLabelValues(a.Alert.Kind).Inc()
		}
		d.log.Info("alert", "kind", a.Alert.Kind, "subject", a.Alert.Subject, "id", a.Alert.SubjectID, "rule", a.Alert.Rule, "reason", a.Alert.Reason)
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
func (d *Daemon) housekeeping(ctx context.Context, cons []jetstream.Consumer, names ...string) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastReassert := d.o.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := d.o.Now()
		list := d.eng.Offenders(now)
		if m := d.o.Metrics; m != nil {
			m.Offenders.Reset()
			for _, o := range list {
				m.Offenders.WithLabelValues(o.Limit).Inc()
			}
			for i, c := range cons {
				if info, err := c.Info(ctx); err == nil {
					m.Lag.WithLabelValues(names[i]).Set(float64(info.NumPending))
				}
			}
		}
		if d.o.OffenderSink != nil {
			if err := d.o.OffenderSink(ctx, list); err != nil {
				d.count("store")
			}
		}
		if now.Sub(lastReassert) >= d.o.Reassert {
			lastReassert = now
			for _, a := range d.eng.Active(now) {
				_ = d.do(ctx, &a)
			}
		}
	}
}
