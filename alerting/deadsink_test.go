package alerting

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/streams"
)

// idHook is a webhook that answers 500 while down and otherwise 200,
// counting the delivery ids it answered 200 to.
type idHook struct {
	srv   *httptest.Server
	down  atomic.Bool
	tried atomic.Int64
	mu    sync.Mutex
	got   map[string]int
}

func newIDHook(t *testing.T, down bool) *idHook {
	h := &idHook{got: map[string]int{}}
	h.down.Store(down)
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.tried.Add(1)
		if h.down.Load() {
			w.WriteHeader(500)
			return
		}
		var b WebhookBody
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			w.WriteHeader(400)
			return
		}
		h.mu.Lock()
		h.got[b.DeliveryID]++
		h.mu.Unlock()
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *idHook) ids() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := make(map[string]int, len(h.got))
	for k, v := range h.got {
		m[k] = v
	}
	return m
}

// onceEach reports an error when got does not hold each of ids once.
func onceEach(t *testing.T, who string, got map[string]int, ids []string) {
	t.Helper()
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("%s: delivery %s received %d times, want 1", who, id, got[id])
		}
	}
	if len(got) != len(ids) {
		t.Errorf("%s: %d distinct deliveries, want %d", who, len(got), len(ids))
	}
}

// TestDeadSinkDelaysOnlyItself: with MaxPending 4 and 12 alerts, beside a
// webhook that answers 500 (retried for retry_for, an hour) and one that
// never answers, a healthy webhook gets all 12 alerts, each once, at once:
// each sink reads the stream through its own consumer, so the 4 alerts
// each dead sink holds do not stop the healthy one's intake (with one
// consumer for every sink, the healthy webhook stalled at 4). When the
// dead sinks come back they get their whole backlog, each delivery once:
// it waited in the stream, not in memory.
func TestDeadSinkDelaysOnlyItself(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	good := newIDHook(t, false)
	dead := newIDHook(t, true)
	var hungGot sync.Map
	var hungN atomic.Int64
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		select {
		case <-r.Context().Done():
			return
		case <-release:
		}
		var b WebhookBody
		if json.Unmarshal(body, &b) == nil {
			n, _ := hungGot.LoadOrStore(b.DeliveryID, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			hungN.Add(1)
		}
	}))
	t.Cleanup(hung.Close)
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open) // before hung.Close, which waits for its handlers
	p := policyWith(t, fmt.Sprintf(`  webhooks:
    - {url: %q, secret_env: WEBHOOK_SECRET}
    - {url: %q, secret_env: WEBHOOK_SECRET}
    - {url: %q, secret_env: WEBHOOK_SECRET}
  retry_for: 1h
`, dead.srv.URL, hung.URL, good.srv.URL))
	m := NewMetrics(nil)
	const maxPending = 4
	e.start(e.js, p, m, func(o *Options) {
		o.MaxPending = maxPending
		o.Client = &http.Client{Timeout: time.Minute}
	})
	ids := e.publish(3*maxPending, streams.AlertLockout)
	start := time.Now()
	waitFor(t, "every alert delivered to the healthy webhook", func() bool { return len(good.ids()) == len(ids) })
	t.Logf("the healthy webhook had all %d alerts after %v", len(ids), time.Since(start))
	onceEach(t, "healthy webhook", good.ids(), ids)
	waitFor(t, "the dead webhook retried", func() bool { return dead.tried.Load() > int64(2*maxPending) })
	// Each dead sink holds MaxPending; the rest wait in the stream.
	waitFor(t, "each dead sink holding MaxPending alerts", func() bool { return testutil.ToFloat64(m.Pending) == 2*maxPending })
	for _, i := range []int{0, 1} {
		info := e.consumerInfo(p, i)
		if info.NumAckPending != maxPending || info.NumPending != uint64(len(ids)-maxPending) {
			t.Errorf("webhooks[%d]'s consumer: %d taken and %d waiting in the stream, want %d and %d",
				i, info.NumAckPending, info.NumPending, maxPending, len(ids)-maxPending)
		}
	}
	for _, s := range []string{"webhooks[0]", "webhooks[1]"} {
		if n := testutil.ToFloat64(m.Deliveries.WithLabelValues(s, ResultDelivered)) + testutil.ToFloat64(m.Deliveries.WithLabelValues(s, ResultFailed)); n != 0 {
			t.Errorf("%s delivered or gave up %v", s, n)
		}
	}
	// The dead sinks recover: each gets its whole backlog, each delivery once.
	dead.down.Store(false)
	open()
	waitFor(t, "the recovered webhooks' backlog", func() bool {
		return len(dead.ids()) == len(ids) && hungN.Load() >= int64(len(ids))
	})
	onceEach(t, "recovered 500 webhook", dead.ids(), ids)
	hungIDs := map[string]int{}
	hungGot.Range(func(k, v any) bool { hungIDs[k.(string)] = int(v.(*atomic.Int64).Load()); return true })
	onceEach(t, "recovered hung webhook", hungIDs, ids)
	waitFor(t, "nothing pending", func() bool { return testutil.ToFloat64(m.Pending) == 0 })
	onceEach(t, "healthy webhook, at the end", good.ids(), ids)
}
