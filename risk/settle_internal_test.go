package risk

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/signals"
	"github.com/tollgate-dev/tollgate/streams"
)

// ackLog records, in order, what was done to the fake messages.
type ackLog struct {
	mu  sync.Mutex
	ops []string
}

func (l *ackLog) add(op string) {
	l.mu.Lock()
	l.ops = append(l.ops, op)
	l.mu.Unlock()
}

func (l *ackLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.ops, " ")
}

// fakeMsg is a delivered message that records its acknowledgements.
type fakeMsg struct {
	jetstream.Msg
	name string
	log  *ackLog
}

func (m *fakeMsg) Ack() error                                { m.log.add("ack " + m.name); return nil }
func (m *fakeMsg) DoubleAck(context.Context) error           { m.log.add("confirm " + m.name); return nil }
func (m *fakeMsg) InProgress() error                         { return nil }
func (m *fakeMsg) Metadata() (*jetstream.MsgMetadata, error) { return &jetstream.MsgMetadata{}, nil }

// fakeFuture is an alert's ack the test resolves.
type fakeFuture struct {
	ok  chan *jetstream.PubAck
	err chan error
}

func newFuture() *fakeFuture {
	return &fakeFuture{ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1)}
}
func (f *fakeFuture) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f *fakeFuture) Err() <-chan error            { return f.err }
func (f *fakeFuture) Msg() *nats.Msg               { return nil }
func (f *fakeFuture) stored()                      { f.ok <- &jetstream.PubAck{} }

// settleDaemon is a daemon with nothing but what settling needs.
func settleDaemon() *Daemon {
	return &Daemon{log: slog.New(slog.DiscardHandler)}
}

// alertMsg queues on s a message named name with one alert sent, whose
// ack the returned future gives.
func alertMsg(t *testing.T, s *settler, log *ackLog, name string) *fakeFuture {
	t.Helper()
	f := newFuture()
	p := &inflight{m: &fakeMsg{name: name, log: log}, acted: true,
		sent: []sentAlert{{a: signals.Action{Kind: signals.Alert, Alert: streams.Alert{ID: name}}, f: f}}}
	if err := s.add(p); err != nil {
		t.Fatal(err)
	}
	return f
}

// waitOps waits until log reads want.
func waitOps(t *testing.T, log *ackLog, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for log.String() != want {
		if time.Now().After(deadline) {
			t.Fatalf("acknowledgements %q, want %q", log, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSettlesInOrder: a message is acknowledged only after its alert is
// stored and after every message before it: the second message's alert
// stored first acknowledges nothing. The acknowledgements go out plain
// while more follow, and the last of a run waits for the server's
// confirmation, which confirms the ones before it.
func TestSettlesInOrder(t *testing.T) {
	log := &ackLog{}
	s := settleDaemon().newSettler(context.Background())
	defer func() { _ = s.stop() }()
	f1 := alertMsg(t, s, log, "m1")
	f2 := alertMsg(t, s, log, "m2")
	f3 := alertMsg(t, s, log, "m3")
	f2.stored()
	time.Sleep(20 * time.Millisecond)
	if got := log.String(); got != "" {
		t.Fatalf("acknowledged %q before the first message's alert was stored", got)
	}
	f1.stored()
	waitOps(t, log, "ack m1 ack m2")
	f3.stored()
	waitOps(t, log, "ack m1 ack m2 confirm m3")
}

// TestStopSettlesWhatIsQueued: a stop settles the messages queued before
// it whose alerts are stored within the grace, in order, and confirms
// the last.
func TestStopSettlesWhatIsQueued(t *testing.T) {
	log := &ackLog{}
	ctx, cancel := context.WithCancel(context.Background())
	s := settleDaemon().newSettler(ctx)
	var fs []*fakeFuture
	for i := 1; i <= 3; i++ {
		fs = append(fs, alertMsg(t, s, log, fmt.Sprint("m", i)))
	}
	cancel() // the consume ends: what is queued is still settled
	go func() {
		time.Sleep(50 * time.Millisecond)
		for _, f := range fs {
			f.stored()
		}
	}()
	if err := s.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if got, want := log.String(), "ack m1 ack m2 confirm m3"; got != want {
		t.Fatalf("acknowledgements %q, want %q", got, want)
	}
}

// TestStopNotLeadingLeavesTheRest: once the daemon may no longer act, a
// stop gives up at once on the message whose alert is unconfirmed and
// leaves it and those behind it unacknowledged, for the next leader.
func TestStopNotLeadingLeavesTheRest(t *testing.T) {
	log := &ackLog{}
	d := settleDaemon()
	var leading sync.Mutex
	lead := true
	d.o.Leading = func() bool { leading.Lock(); defer leading.Unlock(); return lead }
	ctx, cancel := context.WithCancel(context.Background())
	s := d.newSettler(ctx)
	f1 := alertMsg(t, s, log, "m1")
	alertMsg(t, s, log, "m2")
	f1.stored()
	waitOps(t, log, "ack m1") // plain: m2 follows
	leading.Lock()
	lead = false
	leading.Unlock()
	cancel()
	start := time.Now()
	if err := s.stop(); err == nil {
		t.Fatal("stop settled m2, whose alert was never stored")
	}
	if took := time.Since(start); took >= finishGrace {
		t.Fatalf("stop took %v, the whole grace, though the daemon no longer leads", took)
	}
	if got := log.String(); got != "ack m1" {
		t.Fatalf("acknowledgements %q, want only m1's", got)
	}
}

// TestStopOnItsOwnIsBounded: a consume that stops without its context
// ending (its consumer deleted) drains for the grace, no longer, when an
// alert's ack never comes and publishing it again keeps failing (a
// nats-server without the streams).
func TestStopOnItsOwnIsBounded(t *testing.T) {
	t.Parallel()
	d := settleDaemon()
	d.o.Publisher = privatePublisher(t)
	log := &ackLog{}
	s := d.newSettler(context.Background())
	alertMsg(t, s, log, "m1")
	start := time.Now()
	if err := s.stop(); err == nil {
		t.Fatal("stop settled m1, whose alert was never stored")
	}
	if took := time.Since(start); took > finishGrace+time.Second {
		t.Fatalf("stop took %v, more than the grace", took)
	}
	if got := log.String(); got != "" {
		t.Fatalf("acknowledgements %q, want none", got)
	}
}

// privatePublisher returns a publisher on a nats-server of t's own.
func privatePublisher(t *testing.T) *streams.Publisher {
	t.Helper()
	nc, err := streams.Connect(testenv.StartNATS(t).URL, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	pub, err := streams.NewPublisher(nc, streams.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pub.Close)
	return pub
}
