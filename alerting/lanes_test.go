package alerting

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// hooks is a policy's webhooks section of urls (signed, json).
func hooks(urls ...string) string {
	s := "  webhooks:\n"
	for _, u := range urls {
		s += fmt.Sprintf("    - {url: %q, secret_env: WEBHOOK_SECRET}\n", u)
	}
	return s + "  retry_for: 1h\n"
}

// consumerExists reports whether the events stream has the consumer name.
func (e *env) consumerExists(name string) bool {
	e.t.Helper()
	_, err := e.js.Consumer(context.Background(), e.cfg.Stream(streams.EventsStream), name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return true
}

// TestConsumerNamesAreStable: a sink's consumer is named after what it
// is (url and format), so reordering the webhooks, changing their kinds
// or secret keeps each name; a url or a format makes another sink; two
// entries of one url and format get two consumers; the names are valid
// JetStream names and carry no part of the url (a Slack url is a secret).
func TestConsumerNamesAreStable(t *testing.T) {
	t.Parallel()
	names := func(section string) []string {
		var out []string
		for _, r := range sinkRefs(policyWith(t, section).Alerting) {
			out = append(out, consumerName(DefaultDurable, r.key))
		}
		return out
	}
	a := names(`  alertmanager: {url: "http://am:9093"}
  webhooks:
    - {url: "https://hooks.slack.com/services/T0/B0/SECRETTOKEN", format: slack}
    - {url: "https://hooks.example.com/a", secret_env: WEBHOOK_SECRET}
`)
	b := names(`  webhooks:
    - {url: "https://hooks.example.com/a", kinds: [lockout]}
    - {url: "https://hooks.slack.com/services/T0/B0/SECRETTOKEN", format: slack, secret_env: OTHER}
  alertmanager: {url: "http://am:9093", labels: {team: sec}}
`)
	if len(a) != 3 || a[0] != b[0] || a[1] != b[2] || a[2] != b[1] {
		t.Errorf("reordered, the names changed: %v, then %v", a, b)
	}
	valid := regexp.MustCompile(`^riskd-alerts-(am|wh)-[0-9a-f]{12}$`)
	for _, n := range a {
		if !valid.MatchString(n) {
			t.Errorf("name %q", n)
		}
	}
	c := names(`  webhooks:
    - {url: "https://hooks.example.com/a", format: slack}
    - {url: "https://hooks.example.com/b"}
    - {url: "https://hooks.example.com/b"}
`)
	if c[0] == a[2] || c[1] == c[2] || c[1] == a[2] {
		t.Errorf("distinct sinks share a name: %v (json a: %s)", c, a[2])
	}
}

// TestUpgradeFromTheSingleConsumer: an earlier version's single consumer
// (<durable>) had acknowledged the first 3 of 6 alerts and held the 4th
// (its process died). The sinks' consumers start at its ack floor + 1:
// each webhook gets alerts 4 to 6, once, and none of the 3 delivered
// before; the single consumer is deleted, and later alerts flow.
func TestUpgradeFromTheSingleConsumer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	old, err := e.js.CreateConsumer(ctx, e.cfg.Stream(streams.EventsStream), jetstream.ConsumerConfig{
		Durable: DefaultDurable, FilterSubject: e.cfg.Prefix + "alerts.>", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: time.Hour, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		t.Fatal(err)
	}
	ids := e.publish(6, streams.AlertLockout)
	batch, err := old.FetchNoWait(4)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range batch.Messages() {
		if n++; n <= 3 {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n != 4 {
		t.Fatalf("the old consumer took %d alerts, want 4", n)
	}
	a, b := newIDHook(t, false), newIDHook(t, false)
	p := policyWith(t, hooks(a.srv.URL, b.srv.URL))
	e.start(e.js, p, nil, nil)
	waitFor(t, "alerts 4 to 6 at both webhooks", func() bool { return len(a.ids()) == 3 && len(b.ids()) == 3 })
	waitFor(t, "the single consumer deleted", func() bool { return !e.consumerExists(DefaultDurable) })
	later := e.publish(2, streams.AlertAnomaly)
	waitFor(t, "the later alerts", func() bool { return len(a.ids()) == 5 && len(b.ids()) == 5 })
	want := append(append([]string(nil), ids[3:]...), later...)
	onceEach(t, "webhooks[0]", a.ids(), want)
	onceEach(t, "webhooks[1]", b.ids(), want)
}

// TestReloadAddsAndRemovesSinks: a webhook added by a reload (placed
// first, so the other moves to webhooks[1]) gets the alerts published
// from then on, even those published before its consumer was created,
// and not the earlier ones; the one already there keeps its
// consumer through the reordering (it gets no alert twice). A webhook
// removed by a reload has its consumer deleted and gets nothing more.
func TestReloadAddsAndRemovesSinks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := newIDHook(t, false), newIDHook(t, false)
	var cur atomic.Pointer[policy.Policy]
	cur.Store(policyWith(t, hooks(a.srv.URL)))
	m := NewMetrics(nil)
	d, _ := e.start(e.js, nil, m, func(o *Options) {
		o.Policy = cur.Load
		o.Reconcile = 20 * time.Millisecond
	})
	first := e.publish(3, streams.AlertLockout)
	waitFor(t, "the first alerts at a", func() bool { return len(a.ids()) == 3 })
	// A sink added by a reload starts after the stream's last alert at
	// the reconcile before: let one pass wholly after the first alerts.
	passes := d.passes.Load()
	waitFor(t, "two reconciles", func() bool { return d.passes.Load() >= passes+2 })

	both := policyWith(t, hooks(b.srv.URL, a.srv.URL))
	cur.Store(both)
	second := e.publish(3, streams.AlertAnomaly) // before b's consumer exists

	waitFor(t, "the second alerts at both", func() bool { return len(a.ids()) == 6 && len(b.ids()) == 3 })
	// a is webhooks[1] now: its label follows its place in the policy.
	if n := testutil.ToFloat64(m.Deliveries.WithLabelValues("webhooks[1]", ResultDelivered)); n != 3 {
		t.Errorf("webhooks[1] delivered %v, want 3 (a's share of the second alerts)", n)
	}

	onlyB := policyWith(t, hooks(b.srv.URL))
	cur.Store(onlyB)
	waitFor(t, "a's consumer deleted", func() bool { return !e.consumerExists(sinkConsumer(both, 1)) })
	third := e.publish(2, streams.AlertStepUp)
	waitFor(t, "the third alerts at b", func() bool { return len(b.ids()) == 5 })
	onceEach(t, "a", a.ids(), append(append([]string(nil), first...), second...))
	onceEach(t, "b", b.ids(), append(append([]string(nil), second...), third...))
	// the webhook records an alert before its answer reaches the
	// deliverer, which acks it only then: wait for the acks
	waitFor(t, "b's consumer owing nothing", func() bool {
		info := e.consumerInfo(onlyB, 0)
		return info.NumAckPending+int(info.NumPending) == 0
	})
}

// TestRestartResumesEachSinkFromItsFloor: a deliverer stops while one
// webhook has taken 5 alerts and another (answering 500) none; 3 more
// are published while none runs. The next deliverer resumes each sink
// from its own consumer's floor: the first webhook gets the 3 new ones
// only, the recovered one all 8; each delivery once.
func TestRestartResumesEachSinkFromItsFloor(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	up, down := newIDHook(t, false), newIDHook(t, true)
	p := policyWith(t, hooks(up.srv.URL, down.srv.URL))
	_, stop := e.start(e.js, p, nil, nil)
	before := e.publish(5, streams.AlertLockout)
	waitFor(t, "the first alerts at the healthy webhook", func() bool { return len(up.ids()) == 5 })
	waitFor(t, "the other retrying", func() bool { return down.tried.Load() >= 5 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if info := e.consumerInfo(p, 0); info.NumAckPending+int(info.NumPending) != 0 {
		t.Errorf("the healthy webhook's consumer owes %d, want 0", info.NumAckPending+int(info.NumPending))
	}
	if info := e.consumerInfo(p, 1); info.NumAckPending+int(info.NumPending) != 5 {
		t.Errorf("the failing webhook's consumer owes %d, want 5", info.NumAckPending+int(info.NumPending))
	}
	down.down.Store(false)
	after := e.publish(3, streams.AlertAnomaly)
	e.start(e.js, p, nil, nil)
	all := append(append([]string(nil), before...), after...)
	waitFor(t, "every alert at both", func() bool { return len(up.ids()) == 8 && len(down.ids()) == 8 })
	waitFor(t, "nothing owed", func() bool { return e.ackPending(p) == 0 })
	onceEach(t, "healthy webhook", up.ids(), all)
	onceEach(t, "recovered webhook", down.ids(), all)
}

// TestSinkRemovedWhileStopped: a webhook removed from the policy while no
// deliverer ran has its consumer deleted by the next one, which goes on
// delivering to the webhook that stayed from its own floor.
func TestSinkRemovedWhileStopped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := newIDHook(t, false), newIDHook(t, false)
	both := policyWith(t, hooks(a.srv.URL, b.srv.URL))
	_, stop := e.start(e.js, both, nil, nil)
	first := e.publish(2, streams.AlertLockout)
	waitFor(t, "the first alerts at both", func() bool { return len(a.ids()) == 2 && len(b.ids()) == 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	onlyB := policyWith(t, hooks(b.srv.URL))
	second := e.publish(2, streams.AlertAnomaly)
	e.start(e.js, onlyB, nil, nil)
	waitFor(t, "a's consumer deleted", func() bool { return !e.consumerExists(sinkConsumer(both, 0)) })
	waitFor(t, "the second alerts at b", func() bool { return len(b.ids()) == 4 })
	onceEach(t, "a", a.ids(), first)
	onceEach(t, "b", b.ids(), append(append([]string(nil), first...), second...))
}
