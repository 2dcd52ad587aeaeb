package alerting

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/streams"
)

// TestDeliveriesShareFewConnections: a flood of alerts to a slow
// receiver opens at most DefaultMaxConns connections to it, however
// many deliveries are in flight (up to MaxPending a sink): the rest wait
// for one, within the delivery's timeout.
func TestDeliveriesShareFewConnections(t *testing.T) {
	t.Parallel()
	var now, peak atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		n := now.Add(1)
		defer now.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		<-release
	}))
	t.Cleanup(srv.Close)
	var o Options
	o.defaults()
	s := &webhookSink{label: "webhooks[0]", url: srv.URL, secret: []byte("s")}
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			_ = s.send(context.Background(), o.Client, Delivery{ID: "d" + strconv.Itoa(i), Alert: streams.Alert{Kind: "lockout"}, Folded: 1}, time.Now())
		})
	}
	deadline := time.Now().Add(5 * time.Second)
	for now.Load() < DefaultMaxConns && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // would more arrive?
	close(release)
	wg.Wait()
	if p := peak.Load(); p != DefaultMaxConns {
		t.Errorf("%d deliveries at once at the receiver; want %d (DefaultMaxConns)", p, DefaultMaxConns)
	}
}
