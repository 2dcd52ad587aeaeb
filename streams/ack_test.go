package streams_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/streams"
)

// TestUnacknowledgedDecisionsAreCounted: a decisions message that the
// server takes and JetStream never acknowledges (a stream whose leader is
// lost in a NATS cluster; here a core subscriber that swallows the
// messages stands in for it) is lost, so its decisions count as dropped
// once the ack is overdue (ReportTimeout). Before, an async publish had
// no ack deadline: the decisions were neither stored nor counted, and
// their futures stayed pending for as long as the connection lived.
func TestUnacknowledgedDecisionsAreCounted(t *testing.T) {
	t.Parallel()
	const n = 10
	e := embedded(t)
	nc, err := streams.Connect(e.URL, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// A responder that never answers: the server delivers the message
	// (no "no responders" status) and no ack ever comes.
	sink, err := nats.Connect(e.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sink.Close)
	got := make(chan struct{}, 64)
	if _, err := sink.Subscribe("noack.decisions.>", func(*nats.Msg) { got <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	if err := sink.Flush(); err != nil {
		t.Fatal(err)
	}
	p, err := streams.NewPublisher(nc, streams.PublisherOptions{Config: streams.Config{Prefix: "noack.", Name: "NOACK"},
		BatchSize: 1, ReportTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	for range n {
		p.Decision(&streams.Decision{Class: "read", IP: "192.0.2.1"})
	}
	for range n {
		<-got // every message reached the server
	}
	testenv.Eventually(t, 10*time.Second, func() string {
		if d := p.Dropped(); d != n {
			return fmt.Sprintf("%d of %d unacknowledged decisions counted as dropped", d, n)
		}
		return ""
	})
}
