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
	// BatchSize is the most decisions in one message (default 256); a
	// message is also cut before it would pass the server's max payload.
	BatchSize int
	// FlushInterval is the longest a decision waits for its batch (default 20ms).
	FlushInterval time.Duration
	// MaxPending bounds unacknowledged async publishes (default 256).
	MaxPending int
	// OnDrop, when set, is called with the number of decisions dropped
	// (queue full, NATS down, publish refused).
	OnDrop func(n int)
	// ReportTimeout bounds a report or alert publish (default 2s), and is
	// the ack deadline of every async publish: a decisions message that
	// JetStream has not acknowledged within it counts as dropped (the
	// server took it and answered nothing: a stream that lost its leader).
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
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(o.MaxPending), jetstream.WithPublishAsyncErrHandler(p.asyncFailed),
		jetstream.WithPublishAsyncTimeout(o.ReportTimeout)) // without it an unanswered publish is never counted, nor freed
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

// closeSlack is how much longer than an ack's deadline Close waits for
// the last acks, so that an unanswered one is counted before it returns.
const closeSlack = 250 * time.Millisecond

// countHeader carries the number of decisions in a message, so a failed
// async publish is counted exactly.
const countHeader = "Tollgate-Count"

// batchSlack is room kept in every message for its headers (the count
// header and NATS's framing), which count towards the server's max
// payload too.
const batchSlack = 256

// batchOpen and batchClose frame the encoded decisions of one message.
var (
	batchOpen  = `{"v":` + strconv.Itoa(SchemaVersion) + `,"decisions":[`
	batchClose = "]}"
)

// batch is one class's decisions waiting to be published, already
// encoded: data holds batchOpen and the decisions, comma-separated.
type batch struct {
	data []byte
	n    int
}

// run batches queued decisions per class and publishes them
// asynchronously. A batch is cut at BatchSize decisions and before the
// decision that would make its message larger than the server's max
// payload (decisions carry attributes whose values a client chooses, so
// 256 of them can pass 1 MiB); a decision too large for any message is
// dropped alone and counted.
func (p *Publisher) run() {
	defer close(p.done)
	batches := map[string]*batch{}
	pending := 0
	var one []byte // the decision being added, encoded
	// the largest message, read again at every tick (a reconnection may
	// reach a server with another max payload), not at every decision
	limit := p.messageLimit()
	tick := time.NewTicker(p.o.FlushInterval)
	defer tick.Stop()
	flush := func(class string) {
		b := batches[class]
		if b == nil || b.n == 0 {
			return
		}
		p.publish(class, append(b.data, batchClose...), b.n)
		pending -= b.n
		*b = batch{} // JetStream keeps the message's buffer until its ack
	}
	flushAll := func() {
		for class := range batches {
			flush(class)
		}
	}
	add := func(d *Decision) {
		var err error
		if one, err = appendOneDecision(one[:0], d); err != nil {
			p.drop(1)
			return
		}
		if len(batchOpen)+len(one)+len(batchClose) > limit {
			p.drop(1) // no message can carry it
			return
		}
		b := batches[d.Class]
		if b == nil {
			b = &batch{}
			batches[d.Class] = b
		}
		if b.n > 0 && len(b.data)+1+len(one)+len(batchClose) > limit {
			flush(d.Class)
		}
		if b.n == 0 {
			b.data = append(make([]byte, 0, max(len(batchOpen)+320*p.o.BatchSize, len(batchOpen)+len(one)+len(batchClose))), batchOpen...)
		} else {
			b.data = append(b.data, ',')
		}
		b.data = append(b.data, one...)
		b.n++
		pending++
		if b.n >= p.o.BatchSize {
			flush(d.Class)
		}
	}
	for {
		select {
		case d := <-p.queue:
			add(&d)
		case <-tick.C:
			if pending > 0 {
				flushAll()
			}
			limit = p.messageLimit()
		case <-p.stop:
			for {
				select {
				case d := <-p.queue:
					add(&d)
					continue
				default:
				}
				break
			}
			flushAll()
			// Each publish is answered or times out (and is counted)
			// within ReportTimeout: wait that and a little more.
			select {
			case <-p.js.PublishAsyncComplete():
			case <-time.After(p.o.ReportTimeout + closeSlack):
			}
			return
		}
	}
}

// messageLimit is the most bytes of decisions one message may carry: the
// server's max payload less batchSlack, or NATS's default max payload
// while no server has said (not connected yet).
func (p *Publisher) messageLimit() int {
	mp := int(p.nc.MaxPayload())
	if mp <= 0 {
		mp = 1 << 20
	}
	return mp - batchSlack
}

// publish sends one batch of n decisions, encoded in data; failures count
// every decision in it as dropped.
func (p *Publisher) publish(class string, data []byte, n int) {
	if !p.nc.IsConnected() {
		p.drop(n)
		return
	}
	msg := &nats.Msg{Subject: p.o.decisionsSubject(class), Data: data, Header: nats.Header{countHeader: []string{strconv.Itoa(n)}}}
	if _, err := p.js.PublishMsgAsync(msg, jetstream.WithStallWait(50*time.Millisecond)); err != nil {
		p.drop(n)
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

// TrustAsync journals e on its TrustSubject without waiting for the ack:
// the future carries it (or the failure). riskd journals a second's
// enrolments this way and waits for their acks together.
func (p *Publisher) TrustAsync(e *TrustEnrolment) (jetstream.PubAckFuture, error) {
	if !p.nc.IsConnected() {
		return nil, ErrNotConnected
	}
	data, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("streams: encode trust enrolment: %w", err)
	}
	msg := &nats.Msg{Subject: TrustSubject(p.o.Prefix, e.Account, e.Device), Data: data}
	f, err := p.js.PublishMsgAsync(msg, jetstream.WithStallWait(p.o.ReportTimeout))
	if err != nil {
		return nil, fmt.Errorf("streams: publish trust enrolment: %w", err)
	}
	return f, nil
}

// AlertAsync publishes a on <prefix>alerts.<kind> without waiting for
// the ack: the future carries it (or the failure). a.ID is the message
// id, as with Alert, so publishing a again after a failed or unanswered
// future stores it once. riskd sends a run of lockouts' alerts this way
// and waits for their acks together (docs/scaling.md).
func (p *Publisher) AlertAsync(a *Alert) (jetstream.PubAckFuture, error) {
	msg, err := p.alertMsg(a)
	if err != nil {
		return nil, err
	}
	f, err := p.js.PublishMsgAsync(msg, jetstream.WithMsgID(a.ID), jetstream.WithStallWait(p.o.ReportTimeout))
	if err != nil {
		return nil, fmt.Errorf("streams: publish alert %s: %w", a.ID, err)
	}
	return f, nil
}

// alertMsg is a's message, once connected.
func (p *Publisher) alertMsg(a *Alert) (*nats.Msg, error) {
	if !p.nc.IsConnected() {
		return nil, ErrNotConnected
	}
	data, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("streams: encode alert: %w", err)
	}
	return &nats.Msg{Subject: p.o.alertsSubject(a.Kind), Data: data}, nil
}

// Alert publishes a on <prefix>alerts.<kind> and waits for the ack. a.ID
// is the message id, so a replayed episode is stored once.
func (p *Publisher) Alert(ctx context.Context, a *Alert) error {
	msg, err := p.alertMsg(a)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, p.o.ReportTimeout)
	defer cancel()
	if _, err := p.js.PublishMsg(ctx, msg, jetstream.WithMsgID(a.ID)); err != nil {
		return fmt.Errorf("streams: publish alert %s: %w", a.ID, err)
	}
	return nil
}
