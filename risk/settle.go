package risk

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/signals"
)

// Bounds of the pipeline between consuming a message and settling it.
const (
	// settleWindow is the most messages whose actions are done, or whose
	// alerts are sent, waiting to be settled: confirmed and acknowledged.
	settleWindow = 256
	// confirmEvery is the most acting messages acknowledged without the
	// server's confirmation before one is confirmed (ackDone).
	confirmEvery = 64
	// alertAckWait bounds the wait for an alert's ack; past it the alert
	// is published again (its message id stores it once).
	alertAckWait = 2 * time.Second
)

// ErrAlertUnconfirmed is a sent alert whose ack did not come in time.
var ErrAlertUnconfirmed = errors.New("risk: alert not confirmed in time")

// sentAlert is an alert action published without waiting, and the future
// of its ack (nil when it could not be sent at all).
type sentAlert struct {
	a signals.Action
	f jetstream.PubAckFuture
}

// inflight is a message whose store actions are done and whose alerts
// are sent, waiting for their acks before the message is acknowledged.
type inflight struct {
	m     jetstream.Msg
	acted bool
	sent  []sentAlert
}

// settler settles a consumer's messages in their order, beside the
// consume loop: it waits for each message's alerts' acks (publishing an
// alert again when its ack failed or did not come) and then acknowledges
// the message. So a run of lockouts costs the consumer a store write
// each, not a publish round trip and an ack round trip each, which on a
// replicated JetStream wait for a quorum (BenchmarkDaemonLockouts).
// Every message is still acknowledged only after all its actions took
// effect, and in order.
type settler struct {
	d      *Daemon
	ctx    context.Context // the consume's, outliving its end by finishGrace
	cancel context.CancelFunc
	unhook func() bool

	mu     sync.Mutex
	items  []*inflight // the first is being settled
	closed bool
	more   chan struct{} // an item added, or closed
	space  chan struct{} // an item settled
	done   chan struct{} // run returned; err is set
	err    error
}

// newSettler starts a settler for a consume running under ctx. Once ctx
// ends, what is queued is still settled for up to finishGrace and only
// while the daemon may act (a call under way is cancelled once it may
// not): a message cut short (its alert published, its ack not sent)
// would be acted on again by the riskd after this one.
func (d *Daemon) newSettler(ctx context.Context) *settler {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &settler{d: d, ctx: sctx, cancel: cancel, more: make(chan struct{}, 1), space: make(chan struct{}, 1), done: make(chan struct{})}
	s.unhook = context.AfterFunc(ctx, func() { d.graceWhileLeading(sctx, cancel) })
	go s.run()
	return s
}

// graceWhileLeading cancels cancel once finishGrace has passed, or as soon
// as the daemon may no longer act, unless ctx ends first.
func (d *Daemon) graceWhileLeading(ctx context.Context, cancel context.CancelFunc) {
	grace := time.NewTimer(finishGrace)
	defer grace.Stop()
	poll := time.NewTicker(finishPoll)
	defer poll.Stop()
	for d.Leading() {
		select {
		case <-ctx.Done():
			return
		case <-grace.C:
			cancel()
			return
		case <-poll.C:
		}
	}
	cancel()
}

// signal wakes a waiter on c without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// add queues p, waiting while settleWindow messages are queued; it
// returns the settler's error once it has stopped on one.
func (s *settler) add(p *inflight) error {
	for {
		select {
		case <-s.done:
			return s.err
		default:
		}
		s.mu.Lock()
		if len(s.items) < settleWindow {
			s.items = append(s.items, p)
			s.mu.Unlock()
			signal(s.more)
			return nil
		}
		s.mu.Unlock()
		select {
		case <-s.space:
		case <-s.done:
		}
	}
}

// stop settles what is queued (within the grace of newSettler) and
// returns the settler's error, if it stopped on one.
func (s *settler) stop() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	signal(s.more)
	if s.unhook() {
		// the consume stopped on its own (its consumer gone), not by its
		// context: the drain gets the same grace
		go s.d.graceWhileLeading(s.ctx, s.cancel)
	}
	<-s.done
	s.cancel()
	return s.err
}

// next returns the message to settle, waiting for one; nil once closed
// and drained.
func (s *settler) next() *inflight {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.items) == 0 {
		if s.closed {
			return nil
		}
		s.mu.Unlock()
		<-s.more
		s.mu.Lock()
	}
	return s.items[0]
}

// run settles the queued messages in order until closed and drained, or
// until one cannot be settled (the daemon may not act, its context
// ended): that message and the ones after it stay unacknowledged.
func (s *settler) run() {
	defer close(s.done)
	unconfirmed := 0
	for p := s.next(); p != nil; p = s.next() {
		if err := s.settle(p); err != nil {
			s.err = err
			if unconfirmed > 0 {
				s.d.flushAcks()
			}
			return
		}
		s.mu.Lock()
		s.items[0] = nil
		s.items = s.items[1:]
		last := len(s.items) == 0
		s.mu.Unlock()
		signal(s.space)
		if p.acted {
			unconfirmed++
		}
		// Acknowledgements travel in order, so the confirmation of one
		// confirms the plain ones before it.
		if unconfirmed > 0 && (last || unconfirmed >= confirmEvery) {
			ackDone(p.m, true)
			unconfirmed = 0
		} else {
			_ = p.m.Ack()
		}
	}
}

// flushAcks waits, within ackWait, until the server has what the daemon
// sent, the plain acknowledgements among it: a settler that stops midway
// has no later message whose confirmation would confirm them.
func (d *Daemon) flushAcks() {
	if d.js != nil {
		_ = d.js.Conn().FlushTimeout(ackWait)
	}
}

// settle waits for p's alerts' acks, publishing again (and retrying, as
// execute does) each alert whose ack failed or did not come.
func (s *settler) settle(p *inflight) error {
	for i := range p.sent {
		x := &p.sent[i]
		if x.f != nil {
			err := s.await(x.f)
			if err == nil {
				s.d.alerted(&x.a.Alert)
				continue
			}
			if s.ctx.Err() != nil {
				return s.ctx.Err()
			}
			s.d.count("alert")
			s.d.log.Warn("alert not confirmed; publishing it again", "id", x.a.Alert.ID, "err", err)
		}
		if err := s.d.execute(s.ctx, s.progress, []signals.Action{x.a}); err != nil {
			return err
		}
	}
	return nil
}

// await waits for f's ack, within alertAckWait.
func (s *settler) await(f jetstream.PubAckFuture) error {
	t := time.NewTimer(alertAckWait)
	defer t.Stop()
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return err
	case <-t.C:
		return ErrAlertUnconfirmed
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

// progress marks every queued message in progress, so that JetStream
// does not redeliver them while an action of the first is retried.
func (s *settler) progress() {
	s.mu.Lock()
	ms := make([]jetstream.Msg, len(s.items))
	for i, p := range s.items {
		ms[i] = p.m
	}
	s.mu.Unlock()
	for _, m := range ms {
		_ = m.InProgress()
	}
}
