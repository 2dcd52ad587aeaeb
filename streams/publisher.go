package streams

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PublisherOptions configures a Publisher.
type PublisherOptions struct {
	Config
	// QueueSize bounds the decisions waiting to be published (default
	// 65536); past it, decisions are dropped and counted.
	QueueSize int
	// BatchSize is the most decisions in one message (default 256).
	BatchSize int
	// FlushInterval is the longest a decision waits for its batch (default 20ms).
	FlushInterval time.Duration
	// MaxPending bounds unacknowledged async publishes (default 256).
	MaxPending int
	// OnDrop, when set, is called with the number of decisions dropped
	// (queue full, NATS down, publish refused).
	OnDrop func(n int)
	// ReportTimeout bounds a report or alert publish (default 2s).
	ReportTimeout time.Duration
}

// Publisher publishes decisions without ever blocking the request path,
// and reports and alerts with acknowledgement. It is safe for concurrent
// use; Close flushes and stops it.
type Publisher struct {
	o       PublisherOptions
	js      jetstream.JetStream
	nc      *nats.Conn
	queue   chan Decision
	dropped atomic.Uint64
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// NewPublisher starts a Publisher on nc.
func NewPublisher(nc *nats.Conn, o PublisherOptions) (*Publisher, error) {
	o.defaults()
	if o.QueueSize <= 0 {
		o.QueueSize = 65536
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 256
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = 20 * time.Millisecond
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 256
	}
	if o.ReportTimeout <= 0 {
		o.ReportTimeout = 2 * time.Second
	}
	p := &Publisher{o: o, nc: nc, queue: make(chan Decision, o.QueueSize), stop: make(chan struct{}), done: make(chan struct{})}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(o.MaxPending), jetstream.WithPublishAsyncErrHandler(p.asyncFailed))
	if err != nil {
		return nil, fmt.Errorf("streams: jetstream: %w", err)
	}
	p.js = js
	go p.run()
	return p, nil
}

// JetStream returns the publisher's JetStream context.
func (p *Publisher) JetStream() jetstream.JetStream { return p.js }

// asyncFailed counts the decisions of an async publish that failed after
// it was sent (no ack in time, stream refused it).
func (p *Publisher) asyncFailed(_ jetstream.JetStream, m *nats.Msg, _ error) {
	if n, err := strconv.Atoi(m.Header.Get(countHeader)); err == nil && n > 0 {
		p.drop(n)
	}
}

// Decision queues d for publishing. It never blocks: when the queue is
// full the decision is dropped and counted.
func (p *Publisher) Decision(d *Decision) {
	select {
	case p.queue <- *d:
	default:
		p.drop(1)
	}
}

// Dropped returns the number of decisions dropped so far.
func (p *Publisher) Dropped() uint64 { return p.dropped.Load() }

func (p *Publisher) drop(n int) {
	p.dropped.Add(uint64(n))
	if p.o.OnDrop != nil {
		p.o.OnDrop(n)
	}
}

// Close publishes what is queued (bounded by one flush) and stops.
func (p *Publisher) Close() {
	p.once.Do(func() { close(p.stop) })
	<-p.done
}

// countHeader carries the number of decisions in a message, so a failed
// async publish is counted exactly.
const countHeader = "Tollgate-Count"

// run batches queued decisions per class and publishes them asynchronously.
func (p *Publisher) run() {
	defer close(p.done)
	batches := map[string][]Decision{}
	pending := 0
	tick := time.NewTicker(p.o.FlushInterval)
	defer tick.Stop()
	flush := func(class string) {
		b := batches[class]
		if len(b) == 0 {
			return
		}
		p.publish(class, b)
		pending -= len(b)
		batches[class] = b[:0]
	}
	flushAll := func() {
		for class := range batches {
			flush(class)
		}
	}
	for {
		select {
		case d := <-p.queue:
			b := append(batches[d.Class], d)
			batches[d.Class] = b
			pending++
			if len(b) >= p.o.BatchSize {
				flush(d.Class)
			}
		case <-tick.C:
			if pending > 0 {
				flushAll()
			}
		case <-p.stop:
			for {
				select {
				case d := <-p.queue:
					batches[d.Class] = append(batches[d.Class], d)
					continue
				default:
				}
				break
			}
			flushAll()
			select {
			case <-p.js.PublishAsyncComplete():
			case <-time.After(p.o.ReportTimeout):
			}
			return
		}
	}
}

// publish sends one batch; failures count every decision in it as dropped.
func (p *Publisher) publish(class string, b []Decision) {
	if !p.nc.IsConnected() {
		p.drop(len(b))
		return
	}
	// a buffer of its own per batch: JetStream keeps the message until
	// its ack (the encoder writes what json.Marshal would, without
	// reflection and in one allocation)
	data, err := AppendDecisionBatch(make([]byte, 0, 320*len(b)), &DecisionBatch{V: SchemaVersion, Decisions: b})
	if err != nil {
		p.drop(len(b))
		return
	}
	msg := &nats.Msg{Subject: p.o.decisionsSubject(class), Data: data, Header: nats.Header{countHeader: []string{strconv.Itoa(len(b))}}}
	if _, err := p.js.PublishMsgAsync(msg, jetstream.WithStallWait(50*time.Millisecond)); err != nil {
		p.drop(len(b))
	}
}

// Report publishes r on <prefix>reports.<type> and waits for JetStream's
// acknowledgement (bounded by ReportTimeout and ctx). r.ID is the message
// id: a retried report is stored once.
func (p *Publisher) Report(ctx context.Context, r *Report) error {
	if !p.nc.IsConnected() {
		return ErrNotConnected
	}
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("streams: encode report: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, p.o.ReportTimeout)
	defer cancel()
	if _, err := p.js.Publish(ctx, p.o.reportsSubject(r.Type), data, jetstream.WithMsgID(r.ID)); err != nil {
		return fmt.Errorf("streams: publish report %s: %w", r.ID, err)
	}
	return nil
}

// Audit publishes a on <prefix>audit.<action> and waits for JetStream's
// acknowledgement (bounded by ReportTimeout and ctx). a.AuditID is the
// message id, so a retried publish is stored once.
func (p *Publisher) Audit(ctx context.Context, a *Audit) error {
	if !p.nc.IsConnected() {
		return ErrNotConnected
	}
	data, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("streams: encode audit: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, p.o.ReportTimeout)
	defer cancel()
	if _, err := p.js.Publish(ctx, p.o.Prefix+"audit."+a.Action, data, jetstream.WithMsgID(a.AuditID)); err != nil {
		return fmt.Errorf("streams: publish audit %s %s: %w", a.Action, a.AuditID, err)
	}
	return nil
}

// Alert publishes a on <prefix>alerts.<kind> and waits for the ack. a.ID
// is the message id, so a replayed episode is stored once.
func (p *Publisher) Alert(ctx context.Context, a *Alert) error {
	if !p.nc.IsConnected() {
		return ErrNotConnected
	}
	data, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("streams: encode alert: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, p.o.ReportTimeout)
	defer cancel()
	if _, err := p.js.Publish(ctx, p.o.alertsSubject(a.Kind), data, jetstream.WithMsgID(a.ID)); err != nil {
		return fmt.Errorf("streams: publish alert %s: %w", a.ID, err)
	}
	return nil
}
