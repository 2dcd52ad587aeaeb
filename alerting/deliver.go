// Package alerting delivers Tollgate's alerts (contract 7.2) to where a
// security team looks: Alertmanager's API v2, signed JSON webhooks and
// Slack incoming webhooks, as the policy's `alerting` section says.
//
// Delivery is at least once, and nothing is lost: a Deliverer reads the
// alerts from their JetStream stream through one durable consumer per
// sink ("<durable>-am-<hash>", "<durable>-wh-<hash>", the hash of the
// sink's url and format), and each consumer acknowledges an alert only
// when its sink has taken it (answered 2xx) or has given it up after
// `retry_for` (counted as failed). Until then the alert stays pending on
// that sink's consumer (its ack deadline pushed back while it is worked
// on), so a receiver outage only delays that receiver, whose backlog
// waits in the stream (at most MaxPending of it in memory), and a process
// that stops or dies leaves it to be delivered again by the next one.
// Receivers may thus see a delivery twice, with the same delivery_id:
// they dedupe on it.
//
// Repeats of one (kind, subject, id) within `fold` of the first (by the
// alerts' own ts) become one delivery carrying `folded`, sent when the
// window closes. Only one process delivers: the service runs a Deliverer
// only while it leads (riskd's lease; the one-process limiter always).
package alerting

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

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
	// Durable starts the names of the sinks' durable consumers (default
	// "riskd-alerts": "riskd-alerts-wh-<hash>"). A consumer of this very
	// name is the single consumer of earlier versions: the sinks'
	// consumers start at its ack floor, then it is deleted.
	Durable string
	// Getenv reads the webhooks' secrets (default os.Getenv).
	Getenv func(string) string
	// Client sends the deliveries (default: a client with Timeout 10s
	// that follows no redirect).
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
	// MaxPending bounds, per sink, the alerts taken and not yet
	// acknowledged (default 10,000): a sink that owes that many takes no
	// more from the stream, the others go on.
	MaxPending int
	// StartBack is how far back the first consumers start in the stream
	// when there is none yet (default 10m): alerts published just before
	// the first delivering process started are still delivered. A sink
	// added later starts with the alerts published from then on.
	StartBack time.Duration
	// Reconcile is how often the policy's sinks are compared with the
	// consumers running (default 1s): a reload that adds or removes a
	// sink takes effect within it.
	Reconcile time.Duration
}

// Defaults of Options.
const (
	DefaultDurable     = "riskd-alerts"
	DefaultTimeout     = 10 * time.Second
	DefaultBackoffBase = time.Second
	DefaultBackoffMax  = 5 * time.Minute
	DefaultAckWait     = 30 * time.Second
	DefaultMaxPending  = 10_000
	// DefaultMaxConns bounds the default client's connections to one
	// receiver: a flood of alerts (up to MaxPending a sink in flight)
	// to a slow one waits for these instead of opening thousands.
	DefaultMaxConns  = 16
	DefaultStartBack = 10 * time.Minute
	DefaultReconcile = time.Second
	recentRecords    = 100
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
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxConnsPerHost, tr.MaxIdleConnsPerHost = DefaultMaxConns, DefaultMaxConns
		o.Client = &http.Client{Timeout: DefaultTimeout, CheckRedirect: noRedirects, Transport: tr}
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
	if o.Reconcile <= 0 {
		o.Reconcile = DefaultReconcile
	}
	if o.Streams.Prefix == "" {
		o.Streams.Prefix = streams.DefaultPrefix
	}
}

// Deliverer delivers alerts from the stream. Use New, then Run; Recent
// may be called from any goroutine.
type Deliverer struct {
	o      Options
	log    *slog.Logger
	ours   *regexp.Regexp // the names of the sinks' consumers
	passes atomic.Int64   // reconciles done (for tests)
	mu     sync.Mutex     // guards recent
	recent []Record       // ring, newest at next-1
	next   int
}

// New validates o and returns a Deliverer.
func New(o Options) (*Deliverer, error) {
	if o.JetStream == nil || o.Policy == nil {
		return nil, errors.New("alerting: jetstream and policy are required")
	}
	o.defaults()
	return &Deliverer{o: o, log: o.Logger, ours: regexp.MustCompile(`^` + regexp.QuoteMeta(o.Durable) + `-(am|wh)-[0-9a-f]{12}$`)}, nil
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
// back to the stream for the next process) or a sink's consumer is
// deleted under it (its error). Every Reconcile, while leading, it
// compares the policy's sinks with the consumers it runs: a new sink's
// consumer is created and run, a removed sink's consumer is stopped and
// deleted. It returns once every delivery it started has ended.
func (d *Deliverer) Run(ctx context.Context) error {
	lanes := map[string]*lane{}
	defer func() {
		for _, l := range lanes {
			l.stop()
		}
	}()
	failed := make(chan error, 1)
	first, seen := true, uint64(0) // seen: the stream's last sequence at the last reconcile
	t := time.NewTicker(d.o.Reconcile)
	defer t.Stop()
	for {
		if d.o.Leading() {
			last, err := d.reconcile(ctx, lanes, first, seen, failed)
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil:
				d.log.Warn("alerting: reconcile the sinks' consumers", "err", err)
			default:
				first, seen = false, last
				d.passes.Add(1)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			return err
		case <-t.C:
		}
	}
}

// reconcile makes lanes run the consumers of the policy's sinks: it
// creates and starts those missing, stops the removed ones and deletes
// their consumers (and, on the first call, the consumers of sinks removed
// while no process delivered), and deletes the single consumer of earlier
// versions once every sink's consumer started from its ack floor. seen
// is the stream's last sequence at the previous reconcile, read before
// that reconcile read the policy: a sink that was not in that policy
// starts after seen, so it gets every alert published after the reload
// that added it. It returns the stream's last sequence, read before the
// policy.
func (d *Deliverer) reconcile(ctx context.Context, lanes map[string]*lane, first bool, seen uint64, failed chan<- error) (uint64, error) {
	stream, err := d.o.JetStream.Stream(ctx, d.o.Streams.Stream(streams.EventsStream))
	if err != nil {
		return 0, fmt.Errorf("alerting: stream: %w", err)
	}
	last := stream.CachedInfo().State.LastSeq
	var al *policy.Alerting
	if p := d.o.Policy(); p != nil {
		al = p.Alerting
	}
	want := map[string]sinkKey{}
	var names []string
	for _, r := range sinkRefs(al) {
		name := consumerName(d.o.Durable, r.key)
		want[name] = r.key
		names = append(names, name)
	}
	changed := first
	for _, name := range names {
		changed = changed || lanes[name] == nil
	}
	for name := range lanes {
		_, kept := want[name]
		changed = changed || !kept
	}
	if !changed {
		return last, nil
	}
	existing := map[string]bool{}
	lister := stream.ConsumerNames(ctx)
	for name := range lister.Name() {
		existing[name] = true
	}
	if err := lister.Err(); err != nil {
		return 0, fmt.Errorf("alerting: list consumers: %w", err)
	}
	start, err := d.startOf(ctx, stream, existing, first, seen)
	if err != nil {
		return 0, err
	}
	for _, name := range names {
		if lanes[name] != nil {
			continue
		}
		var c jetstream.Consumer
		if existing[name] {
			c, err = stream.Consumer(ctx, name)
		} else {
			cfg := d.consumerConfig(name, want[name])
			start(&cfg)
			c, err = stream.CreateConsumer(ctx, cfg)
			if errors.Is(err, jetstream.ErrConsumerExists) {
				c, err = stream.Consumer(ctx, name)
			}
		}
		if err != nil {
			return 0, fmt.Errorf("alerting: consumer %s: %w", name, err)
		}
		lanes[name] = d.startLane(ctx, name, want[name], c, failed)
		d.log.Info("alerting: delivering to a sink", "consumer", name)
	}
	for name, l := range lanes {
		if _, kept := want[name]; kept {
			continue
		}
		l.stop() // hands its alerts back
		delete(lanes, name)
		existing[name] = true
	}
	for name := range existing {
		if _, kept := want[name]; kept || !d.ours.MatchString(name) {
			continue
		}
		if err := stream.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return 0, fmt.Errorf("alerting: delete the consumer %s of a removed sink: %w", name, err)
		}
		d.log.Info("alerting: a sink removed; its consumer deleted", "consumer", name)
	}
	if existing[d.o.Durable] && len(names) > 0 {
		if err := stream.DeleteConsumer(ctx, d.o.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return 0, fmt.Errorf("alerting: delete the single consumer %s: %w", d.o.Durable, err)
		}
		d.log.Info("alerting: the single consumer replaced by one per sink", "consumer", d.o.Durable)
	}
	return last, nil
}

// startOf returns how a sink's consumer created now starts:
//   - upgrading (the single consumer <durable> exists): after its ack floor;
//   - a sink added by a reload (seen > 0): after seen;
//   - at start, beside the consumers of other sinks: after the furthest
//     of their ack floors (where delivery had got to);
//   - at start with no consumer at all (the first delivering process):
//     StartBack ago.
func (d *Deliverer) startOf(ctx context.Context, stream jetstream.Stream, existing map[string]bool, first bool, seen uint64) (func(*jetstream.ConsumerConfig), error) {
	after := func(seq uint64) func(*jetstream.ConsumerConfig) {
		return func(c *jetstream.ConsumerConfig) {
			c.DeliverPolicy, c.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq+1
		}
	}
	floor := func(name string) (uint64, error) {
		c, err := stream.Consumer(ctx, name)
		if err != nil {
			return 0, fmt.Errorf("alerting: consumer %s: %w", name, err)
		}
		return c.CachedInfo().AckFloor.Stream, nil
	}
	if existing[d.o.Durable] {
		f, err := floor(d.o.Durable)
		return after(f), err
	}
	if !first {
		return after(seen), nil
	}
	var furthest uint64
	found := false
	for name := range existing {
		if !d.ours.MatchString(name) {
			continue
		}
		f, err := floor(name)
		if err != nil {
			return nil, err
		}
		furthest, found = max(furthest, f), true
	}
	if found {
		return after(furthest), nil
	}
	since := d.o.Now().Add(-d.o.StartBack)
	return func(c *jetstream.ConsumerConfig) {
		c.DeliverPolicy, c.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}, nil
}

// consumerConfig is the configuration of k's consumer (its start aside).
func (d *Deliverer) consumerConfig(name string, k sinkKey) jetstream.ConsumerConfig {
	what := "Alertmanager"
	if k.kind == "wh" {
		what = "a " + k.format + " webhook"
	}
	return jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "Tollgate alert delivery to " + what + " (alerting section)", // no url: it may be a secret
		FilterSubject: d.o.Streams.Prefix + "alerts.>",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       d.o.AckWait,
		MaxAckPending: d.o.MaxPending,
		Replicas:      d.o.Streams.Replicas, // 0: the stream's
	}
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

// noRedirects makes a client answer a redirect with the 3xx itself: only
// a 2xx is a delivery (7.2), and a 301 or 302 followed is a GET without
// the alert, whose 200 would count it delivered.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
