// Package alerting delivers Tollgate's alerts (contract 7.2) to where a
// security team looks: Alertmanager's API v2, signed JSON webhooks and
// Slack incoming webhooks, as the policy's `alerting` section says.
//
// Delivery is at least once, and nothing is lost: a Deliverer reads the
// alerts from their JetStream stream through a durable consumer and
// acknowledges an alert only when every sink has taken it (answered 2xx)
// or has been given up after `retry_for` (counted as failed). Until then
// the alert stays pending on the consumer (its ack deadline pushed back
// while it is worked on), so a receiver outage only delays it and a
// process that stops or dies leaves it to be delivered again by the next
// one. Receivers may thus see a delivery twice, with the same
// delivery_id: they dedupe on it.
//
// Repeats of one (kind, subject, id) within `fold` of the first (by the
// alerts' own ts) become one delivery carrying `folded`, sent when the
// window closes. Only one process delivers: the service runs a Deliverer
// only while it leads (riskd's lease; the one-process limiter always).
package alerting

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// Options configures a Deliverer.
type Options struct {
	// JetStream reads the alerts stream (required).
	JetStream jetstream.JetStream
	// Policy returns the policy in force (required); its Alerting section
	// is read for every alert, so reloads apply to the next delivery.
	Policy func() *policy.Policy
	// Leading, when set, is asked before each pull and each attempt
	// whether this process may act (riskd's lease, 7.5): while it says no,
	// the deliverer takes no alert, and one it holds when it stops leading
	// is handed back, as when its context ends. nil: always.
	Leading func() bool
	// Streams names the subjects and streams (must match the limiter's).
	Streams streams.Config
	// Durable is the durable consumer's name (default "riskd-alerts").
	Durable string
	// Getenv reads the webhooks' secrets (default os.Getenv).
	Getenv func(string) string
	// Client sends the deliveries (default: a client with Timeout 10s).
	Client *http.Client
	// Metrics records deliveries (default: unregistered metrics).
	Metrics *Metrics
	// Logger (default: discard).
	Logger *slog.Logger
	// Now is the clock of signatures and of retry_for (default time.Now).
	Now func() time.Time
	// BackoffBase and BackoffMax shape the full-jitter backoff between
	// attempts: the n-th wait is uniform in [0, min(BackoffMax,
	// BackoffBase*2^n)) (defaults 1s and 5m).
	BackoffBase, BackoffMax time.Duration
	// AckWait is the consumer's ack deadline (default 30s): an alert of a
	// process that died is delivered again within it. Alerts being worked
	// on are marked in progress every AckWait/3.
	AckWait time.Duration
	// MaxPending bounds the alerts taken and not yet acknowledged
	// (default 10,000).
	MaxPending int
	// StartBack is how far back a newly created consumer starts in the
	// stream (default 10m): alerts published just before the first
	// delivering process started are still delivered.
	StartBack time.Duration
}

// Defaults of Options.
const (
	DefaultDurable     = "riskd-alerts"
	DefaultTimeout     = 10 * time.Second
	DefaultBackoffBase = time.Second
	DefaultBackoffMax  = 5 * time.Minute
	DefaultAckWait     = 30 * time.Second
	DefaultMaxPending  = 10_000
	DefaultStartBack   = 10 * time.Minute
	recentRecords      = 100
)

func (o *Options) defaults() {
	if o.Durable == "" {
		o.Durable = DefaultDurable
	}
	if o.Leading == nil {
		o.Leading = func() bool { return true }
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: DefaultTimeout}
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.BackoffBase <= 0 {
		o.BackoffBase = DefaultBackoffBase
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = DefaultBackoffMax
	}
	if o.AckWait <= 0 {
		o.AckWait = DefaultAckWait
	}
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.StartBack <= 0 {
		o.StartBack = DefaultStartBack
	}
	if o.Streams.Prefix == "" {
		o.Streams.Prefix = streams.DefaultPrefix
	}
}

// Deliverer delivers alerts from the stream. Use New, then Run; Recent
// may be called from any goroutine.
type Deliverer struct {
	o   Options
	log *slog.Logger
	sem chan struct{} // one slot per alert taken and not yet acknowledged
	wg  sync.WaitGroup

	mu      sync.Mutex // guards pending, groups, recent
	pending map[jetstream.Msg]struct{}
	groups  map[foldKey]*group
	recent  []Record // ring, newest at next-1
	next    int
}

// New validates o and returns a Deliverer.
func New(o Options) (*Deliverer, error) {
	if o.JetStream == nil || o.Policy == nil {
		return nil, errors.New("alerting: jetstream and policy are required")
	}
	o.defaults()
	return &Deliverer{
		o: o, log: o.Logger, sem: make(chan struct{}, o.MaxPending),
		pending: map[jetstream.Msg]struct{}{}, groups: map[foldKey]*group{},
	}, nil
}

// item is one alert taken from the stream.
type item struct {
	msg   jetstream.Msg
	alert streams.Alert
	// published is when the stream stored the alert: retry_for counts
	// from it, so a redelivery does not start the clock again.
	published time.Time
}

// Run delivers until ctx ends (then alerts not yet delivered are handed
// back to the stream for the next process) or the consumer fails (its
// error). It returns once every delivery it started has ended.
func (d *Deliverer) Run(ctx context.Context) error {
	c, err := d.consumer(ctx)
	if err != nil {
		return err
	}
	// The deliveries outlive intake: they are stopped (and hand their
	// alerts back) only once no pull request of this process is left on
	// the server, which would take the handed-back alerts again.
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	go d.keepAlive(dctx)
	err = d.intake(ctx, dctx, c)
	cancel()
	d.wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// fetchWait bounds each pull request: at most one, this long, is open on
// the server at any time.
const fetchWait = time.Second

// notLeadingPause is how often a deliverer that is not leading asks again
// whether it leads.
const notLeadingPause = 250 * time.Millisecond

// intake fetches alerts and starts their deliveries (under dctx) until
// ctx ends or the consumer is gone. It returns after its last pull
// request has ended.
func (d *Deliverer) intake(ctx, dctx context.Context, c jetstream.Consumer) error {
	for ctx.Err() == nil {
		if !d.o.Leading() {
			// Another process delivers: a pull request of this one would
			// take alerts only to hand them back, and, with both pulling,
			// could take them again and again before the leader does.
			pause(ctx, notLeadingPause)
			continue
		}
		n := min(cap(d.sem)-len(d.sem), 256)
		if n == 0 {
			n = 1 // waits for a free slot below
		}
		batch, err := c.Fetch(n, jetstream.FetchMaxWait(fetchWait))
		if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("alerting: consume %s: %w", d.o.Durable, err)
		}
		if err != nil {
			d.log.Warn("alerting: fetch", "err", err)
			pause(ctx, 250*time.Millisecond)
			continue
		}
		for m := range batch.Messages() {
			select {
			case d.sem <- struct{}{}: // freed as deliveries end
				d.take(dctx, m)
			case <-ctx.Done():
				_ = m.Nak() // every slot taken and stopping: the next process takes it
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			d.log.Warn("alerting: fetch", "err", err)
			pause(ctx, 250*time.Millisecond)
		}
	}
	return nil
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// consumer returns the durable consumer of the alerts, creating it to
// start StartBack ago when it does not exist.
func (d *Deliverer) consumer(ctx context.Context) (jetstream.Consumer, error) {
	stream := d.o.Streams.Stream(streams.EventsStream)
	c, err := d.o.JetStream.Consumer(ctx, stream, d.o.Durable)
	if err == nil {
		return c, nil
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("alerting: consumer %s: %w", d.o.Durable, err)
	}
	start := d.o.Now().Add(-d.o.StartBack)
	c, err = d.o.JetStream.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:       d.o.Durable,
		Description:   "Tollgate alert delivery (alerting section)",
		FilterSubject: d.o.Streams.Prefix + "alerts.>",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       d.o.AckWait,
		MaxAckPending: d.o.MaxPending,
		DeliverPolicy: jetstream.DeliverByStartTimePolicy,
		OptStartTime:  &start,
		Replicas:      d.o.Streams.Replicas, // 0: the stream's
	})
	if err != nil {
		return nil, fmt.Errorf("alerting: create consumer %s: %w", d.o.Durable, err)
	}
	return c, nil
}

// take starts the delivery of m (or acknowledges it when there is
// nothing to deliver). It holds one slot of d.sem, which the delivery
// gives back.
func (d *Deliverer) take(ctx context.Context, m jetstream.Msg) {
	d.mu.Lock()
	d.pending[m] = struct{}{}
	d.mu.Unlock()
	d.o.Metrics.Pending.Inc()
	var a streams.Alert
	if err := json.Unmarshal(m.Data(), &a); err != nil || a.Kind == "" {
		d.log.Error("alerting: undecodable alert dropped", "subject", m.Subject(), "err", err)
		d.done(m, m.Term)
		return
	}
	var al *policy.Alerting
	if p := d.o.Policy(); p != nil {
		al = p.Alerting
	}
	if al == nil || a.Shadow && !al.Shadow {
		d.done(m, m.Ack)
		return
	}
	it := item{msg: m, alert: a, published: d.o.Now()}
	if meta, err := m.Metadata(); err == nil {
		it.published = meta.Timestamp
	}
	if al.Fold <= 0 {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.deliver(ctx, []item{it})
		}()
		return
	}
	d.fold(ctx, it, al.Fold)
}

// done finishes m with settle (Ack, Nak or Term) and frees its slot.
func (d *Deliverer) done(m jetstream.Msg, settle func() error) {
	if err := settle(); err != nil {
		d.log.Warn("alerting: settle alert", "subject", m.Subject(), "err", err)
	}
	d.mu.Lock()
	delete(d.pending, m)
	d.mu.Unlock()
	d.o.Metrics.Pending.Dec()
	<-d.sem
}

// keepAlive marks every pending alert in progress every AckWait/3, so a
// delivery retried (or a fold held) longer than AckWait is not handed to
// the consumer again meanwhile.
func (d *Deliverer) keepAlive(ctx context.Context) {
	t := time.NewTicker(d.o.AckWait / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.mu.Lock()
		msgs := make([]jetstream.Msg, 0, len(d.pending))
		for m := range d.pending {
			msgs = append(msgs, m)
		}
		d.mu.Unlock()
		for _, m := range msgs {
			_ = m.InProgress()
		}
	}
}

// deliver delivers items (one alert, or the repeats folded together) to
// every sink that takes their kind, then acknowledges them all; when ctx
// ends first it hands them back (Nak) for the next process.
func (d *Deliverer) deliver(ctx context.Context, items []item) {
	settle := jetstream.Msg.Ack
	if !d.deliverAll(ctx, items) {
		settle = jetstream.Msg.Nak
	}
	for _, it := range items {
		d.done(it.msg, func() error { return settle(it.msg) })
	}
}

// deliverAll reports whether every sink has taken items or given up.
func (d *Deliverer) deliverAll(ctx context.Context, items []item) bool {
	var al *policy.Alerting
	if p := d.o.Policy(); p != nil {
		al = p.Alerting
	}
	if al == nil {
		return true // the section was removed meanwhile: nothing to deliver
	}
	last := items[len(items)-1].alert
	dl := Delivery{ID: items[0].alert.ID, Alert: last, Folded: len(items)}
	if dl.ID == "" {
		dl.ID = fmt.Sprintf("%s-%d", last.Kind, items[0].published.UnixNano())
	}
	deadline := items[0].published.Add(al.RetryFor)
	sinks := sinksFor(al, last.Kind, d.o.Getenv)
	finished := make([]bool, len(sinks))
	var wg sync.WaitGroup
	for i, s := range sinks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			finished[i] = d.attempts(ctx, s, dl, deadline)
		}()
	}
	wg.Wait()
	for _, f := range finished {
		if !f {
			return false
		}
	}
	return true
}

// attempts sends dl to s until it takes it (true), deadline (the
// alert's publication plus retry_for) has passed (true: given up), or ctx
// ends or this process stops leading (false).
func (d *Deliverer) attempts(ctx context.Context, s sink, dl Delivery, deadline time.Time) bool {
	for n := 0; ; n++ {
		if !d.o.Leading() {
			return false // another process acts now: it delivers
		}
		err := s.send(ctx, d.o.Client, dl, d.o.Now())
		if ctx.Err() != nil {
			return false
		}
		if err == nil {
			d.record(s, dl, ResultDelivered, n+1, nil)
			return true
		}
		wait := d.backoff(n)
		if d.o.Now().Add(wait).After(deadline) {
			d.record(s, dl, ResultFailed, n+1, err)
			d.log.Error("alerting: delivery given up after retry_for", "sink", s.name(), "delivery_id", dl.ID,
				"kind", dl.Alert.Kind, "attempts", n+1, "err", err)
			return true
		}
		d.record(s, dl, ResultRetried, n+1, err)
		d.log.Warn("alerting: delivery failed; retrying", "sink", s.name(), "delivery_id", dl.ID,
			"attempt", n+1, "retry_in", wait.String(), "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// backoff is the full-jitter wait after the n-th failed attempt (from 0).
func (d *Deliverer) backoff(n int) time.Duration {
	ceil := d.o.BackoffMax
	if n < 30 {
		ceil = min(ceil, d.o.BackoffBase<<n)
	}
	return time.Duration(rand.Int64N(int64(ceil) + 1))
}
