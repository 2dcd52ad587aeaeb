package risk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// failingCreate is a JetStream whose first creates of a consumer fail,
// as the JetStream API does when it times out under load or the caller's
// context ends between two calls.
type failingCreate struct {
	jetstream.JetStream
	fails atomic.Int32
}

func (f *failingCreate) CreateOrUpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if f.fails.Add(-1) >= 0 {
		return nil, errors.New("nats: timeout")
	}
	return f.JetStream.CreateOrUpdateConsumer(ctx, stream, cfg)
}

// TestRecreateSurvivesAFailedCreate: a consumer riskd recreates at its
// position (its filter wrong, or holding what another riskd left undone)
// is deleted, then created again. When that create failed, the error was
// returned and the position, which only the deleted consumer knew, was
// lost: the next start found no consumer and began at now - window with
// floor 0, acting again on what was already acted on (lockouts, alerts)
// and never reading what came before the window. The create is retried,
// whatever the caller's context, so the consumer comes back at its floor.
func TestRecreateSurvivesAFailedCreate(t *testing.T) {
	t.Parallel()
	pub := privatePublisher(t)
	ctx := context.Background()
	if err := streams.EnsureStreams(ctx, pub.JetStream(), streams.Config{}); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse("p.yaml", []byte("version: 1\nlimits:\n  - {name: ip, by: [ip], rate: 600/min}\n"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{Publisher: pub, Store: bucket.NewMemoryStore(bucket.MemoryOptions{}), Policy: func() *policy.Policy { return p }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	src := d.sources()[0]
	for i := range 5 {
		if _, err := pub.JetStream().Publish(ctx, src.filter, fmt.Appendf(nil, `{"n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	// an older riskd's consumer with another filter, acknowledged up to 3
	old, err := pub.JetStream().CreateOrUpdateConsumer(ctx, src.stream, jetstream.ConsumerConfig{Durable: src.durable, FilterSubject: ">", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := old.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	first, err := old.Info(ctx)
	if err != nil || first.AckFloor.Stream == 0 {
		t.Fatalf("the old consumer's floor: %+v %v", first, err)
	}

	js := &failingCreate{JetStream: d.js}
	js.fails.Store(2)
	d.js = js
	c, floor, err := d.consumer(ctx, src)
	if err != nil {
		t.Fatalf("recreate with two failed creates: %v", err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if floor != first.AckFloor.Stream || info.Config.OptStartSeq != first.AckFloor.Stream+1 || filterOf(info.Config) != src.filter {
		t.Fatalf("recreated with floor %d, start %d, filter %q; want floor %d, start %d, filter %q",
			floor, info.Config.OptStartSeq, filterOf(info.Config), first.AckFloor.Stream, first.AckFloor.Stream+1, src.filter)
	}
}
