package alerting

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// lane delivers to one sink: it reads the alerts through the sink's own
// durable consumer and acknowledges each when the sink has taken it or
// given it up, so a sink that is down holds back only itself.
type lane struct {
	d    *Deliverer
	key  sinkKey
	name string        // the consumer's
	sem  chan struct{} // one slot per alert taken and not yet acknowledged
	wg   sync.WaitGroup

	mu      sync.Mutex // guards pending, groups
	pending map[jetstream.Msg]struct{}
	groups  map[foldKey]*group

	cancel  context.CancelFunc
	stopped chan struct{}
}

// startLane runs the lane of k on c until ctx ends or its stop is
// called; a consumer deleted under it is reported on failed.
func (d *Deliverer) startLane(ctx context.Context, name string, k sinkKey, c jetstream.Consumer, failed chan<- error) *lane {
	l := &lane{d: d, key: k, name: name, sem: make(chan struct{}, d.o.MaxPending),
		pending: map[jetstream.Msg]struct{}{}, groups: map[foldKey]*group{}, stopped: make(chan struct{})}
	ctx, l.cancel = context.WithCancel(ctx)
	go func() {
		defer close(l.stopped)
		if err := l.run(ctx, c); err != nil {
			select {
			case failed <- err:
			default:
			}
		}
	}()
	return l
}

// stop ends the lane and waits until its deliveries have ended (those
// not done handed back to the stream).
func (l *lane) stop() {
	l.cancel()
	<-l.stopped
}

// run delivers until ctx ends or the consumer is gone (its error). It
// returns once every delivery it started has ended.
func (l *lane) run(ctx context.Context, c jetstream.Consumer) error {
	// The deliveries outlive intake: they are stopped (and hand their
	// alerts back) only once no pull request of this lane is left on the
	// server, which would take the handed-back alerts again.
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	go l.keepAlive(dctx)
	err := l.intake(ctx, dctx, c)
	cancel()
	l.wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// fetchWait bounds each pull request: at most one per sink, this long,
// is open on the server at any time.
const fetchWait = time.Second

// notLeadingPause is how often a deliverer that is not leading asks again
// whether it leads.
const notLeadingPause = 250 * time.Millisecond

// intake fetches alerts and starts their deliveries (under dctx) until
// ctx ends or the consumer is gone. It returns after its last pull
// request has ended.
func (l *lane) intake(ctx, dctx context.Context, c jetstream.Consumer) error {
	for ctx.Err() == nil {
		if !l.d.o.Leading() {
			// Another process delivers: a pull request of this one would
			// take alerts only to hand them back, and, with both pulling,
			// could take them again and again before the leader does.
			pause(ctx, notLeadingPause)
			continue
		}
		n := min(cap(l.sem)-len(l.sem), 256)
		if n == 0 {
			n = 1 // waits for a free slot below
		}
		batch, err := c.Fetch(n, jetstream.FetchMaxWait(fetchWait))
		if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("alerting: consume %s: %w", l.name, err)
		}
		if err != nil {
			l.d.log.Warn("alerting: fetch", "consumer", l.name, "err", err)
			pause(ctx, 250*time.Millisecond)
			continue
		}
		for m := range batch.Messages() {
			select {
			case l.sem <- struct{}{}: // freed as deliveries end
				l.take(dctx, m)
			case <-ctx.Done():
				_ = m.Nak() // every slot taken and stopping: the next process takes it
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
				return fmt.Errorf("alerting: consume %s: %w", l.name, err)
			}
			l.d.log.Warn("alerting: fetch", "consumer", l.name, "err", err)
			pause(ctx, 250*time.Millisecond)
		}
	}
	return nil
}

// alerting is the policy's alerting section in force (nil: none).
func (l *lane) alerting() *policy.Alerting {
	if p := l.d.o.Policy(); p != nil {
		return p.Alerting
	}
	return nil
}

// take starts the delivery of m (or acknowledges it when the sink has
// nothing to deliver). It holds one slot of l.sem, which the delivery
// gives back.
func (l *lane) take(ctx context.Context, m jetstream.Msg) {
	l.mu.Lock()
	l.pending[m] = struct{}{}
	l.mu.Unlock()
	l.d.o.Metrics.Pending.Inc()
	var a streams.Alert
	if err := json.Unmarshal(m.Data(), &a); err != nil || a.Kind == "" {
		l.d.log.Error("alerting: undecodable alert dropped", "subject", m.Subject(), "consumer", l.name, "err", err)
		l.done(m, m.Term)
		return
	}
	al := l.alerting()
	if al == nil || a.Shadow && !al.Shadow || sinkOf(al, l.key, a.Kind, l.d.o.Getenv) == nil {
		l.done(m, m.Ack) // not for this sink (or the sink is being removed)
		return
	}
	it := item{msg: m, alert: a, published: l.d.o.Now()}
	if meta, err := m.Metadata(); err == nil {
		it.published = meta.Timestamp
	}
	if al.Fold <= 0 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.deliver(ctx, []item{it})
		}()
		return
	}
	l.fold(ctx, it, al.Fold)
}

// done finishes m with settle (Ack, Nak or Term) and frees its slot.
func (l *lane) done(m jetstream.Msg, settle func() error) {
	if err := settle(); err != nil {
		l.d.log.Warn("alerting: settle alert", "subject", m.Subject(), "consumer", l.name, "err", err)
	}
	l.mu.Lock()
	delete(l.pending, m)
	l.mu.Unlock()
	l.d.o.Metrics.Pending.Dec()
	<-l.sem
}

// keepAlive marks every pending alert in progress every AckWait/3, so a
// delivery retried (or a fold held) longer than AckWait is not handed to
// the consumer again meanwhile.
func (l *lane) keepAlive(ctx context.Context) {
	t := time.NewTicker(l.d.o.AckWait / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		msgs := make([]jetstream.Msg, 0, len(l.pending))
		for m := range l.pending {
			msgs = append(msgs, m)
		}
		l.mu.Unlock()
		for _, m := range msgs {
			_ = m.InProgress()
		}
	}
}

// deliver delivers items (one alert, or the repeats folded together) to
// the lane's sink, then acknowledges them all; when ctx ends first it
// hands them back (Nak) for the next process.
func (l *lane) deliver(ctx context.Context, items []item) {
	settle := jetstream.Msg.Ack
	if !l.deliverOne(ctx, items) {
		settle = jetstream.Msg.Nak
	}
	for _, it := range items {
		l.done(it.msg, func() error { return settle(it.msg) })
	}
}

// deliverOne reports whether the sink has taken items or given up (or
// no longer wants them: removed from the policy, or its kinds changed).
func (l *lane) deliverOne(ctx context.Context, items []item) bool {
	al := l.alerting()
	if al == nil {
		return true // the section was removed meanwhile: nothing to deliver
	}
	last := items[len(items)-1].alert
	dl := Delivery{ID: items[0].alert.ID, Alert: last, Folded: len(items)}
	if dl.ID == "" {
		dl.ID = fmt.Sprintf("%s-%d", last.Kind, items[0].published.UnixNano())
	}
	s := sinkOf(al, l.key, last.Kind, l.d.o.Getenv)
	if s == nil {
		return true
	}
	return l.d.attempts(ctx, s, dl, items[0].published.Add(al.RetryFor))
}
