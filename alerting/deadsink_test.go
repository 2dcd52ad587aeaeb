package alerting

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/streams"
)

// TestDeadSinkDelaysOnlyItself: beside a webhook that always answers 500
// (retried for retry_for, an hour) and one that never answers (each
// attempt ends at the client's timeout), a healthy webhook gets every
// alert at once: each sink is attempted on its own, and an alert the dead
// ones still owe is held (pending, unacknowledged) without holding back
// the healthy one's deliveries.
//
// The alerts here are as many as MaxPending. Beyond that the dead sinks'
// unacknowledged alerts fill MaxPending and intake stops, for every sink,
// until retry_for gives them up: the remaining limit of a single consumer
// acknowledged when every sink took an alert (see the helper's report).
func TestDeadSinkDelaysOnlyItself(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	good := newReceiver(t)
	var failed atomic.Int64
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		failed.Add(1)
		w.WriteHeader(500)
	}))
	t.Cleanup(dead.Close)
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // then the request's context ends with its connection
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(hung.Close)
	t.Cleanup(func() { close(release) }) // before hung.Close, which waits for its handlers
	p := policyWith(t, fmt.Sprintf(`  webhooks:
    - {url: %q, secret_env: WEBHOOK_SECRET}
    - {url: %q, secret_env: WEBHOOK_SECRET}
    - {url: %q, secret_env: WEBHOOK_SECRET}
  retry_for: 1h
`, dead.URL, hung.URL, good.srv.URL))
	m := NewMetrics(nil)
	const maxPending = 8
	e.start(e.js, p, m, func(o *Options) {
		o.MaxPending = maxPending
		o.Client = &http.Client{Timeout: time.Minute}
	})
	ids := e.publish(maxPending, streams.AlertLockout)
	start := time.Now()
	waitFor(t, "every alert delivered to the healthy webhook", func() bool { return len(good.ids()) == len(ids) })
	t.Logf("the healthy webhook had all %d alerts after %v", len(ids), time.Since(start))
	got := good.ids()
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("delivery %s received %d times by the healthy webhook, want 1", id, got[id])
		}
	}
	waitFor(t, "the dead webhook retried", func() bool { return failed.Load() > int64(len(ids)) })
	if n := testutil.ToFloat64(m.Pending); n != maxPending {
		t.Errorf("%v alerts pending, want %d (the dead sinks still owe each)", n, maxPending)
	}
	for _, s := range []string{"webhooks[0]", "webhooks[1]"} {
		if n := testutil.ToFloat64(m.Deliveries.WithLabelValues(s, ResultDelivered)) + testutil.ToFloat64(m.Deliveries.WithLabelValues(s, ResultFailed)); n != 0 {
			t.Errorf("%s delivered or gave up %v", s, n)
		}
	}
}
