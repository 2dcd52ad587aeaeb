package alerting

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/streams"
)

// TestRedirectIsNotADelivery (7.2): only a 2xx answer is a delivery. A
// receiver that redirects (an http:// url moved to https://, 301) is
// answered with a retry, never followed: Go's client would follow a 301
// or 302 with a GET without the alert, and a 200 to that GET counted the
// lost alert delivered.
func TestRedirectIsNotADelivery(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var posts []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		posts = append(posts, r.Method+" "+r.URL.Path)
		mu.Unlock()
		switch r.URL.Path {
		case "/moved":
			http.Redirect(w, r, "/new", http.StatusMovedPermanently)
		case "/temporary":
			http.Redirect(w, r, "/new", http.StatusTemporaryRedirect)
		}
		// /new answers 200 to anything
	}))
	t.Cleanup(srv.Close)
	var o Options
	o.defaults()
	for _, path := range []string{"/moved", "/temporary"} {
		s := &webhookSink{label: "webhooks[0]", url: srv.URL + path, secret: []byte("s")}
		err := s.send(context.Background(), o.Client, Delivery{ID: "d", Alert: streams.Alert{Kind: "lockout"}, Folded: 1}, time.Now())
		if err == nil || !strings.Contains(err.Error(), "answered 30") {
			t.Errorf("%s: a redirect taken as %v, want a failed attempt naming the 3xx", path, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(posts, ",") != "POST /moved,POST /temporary" {
		t.Errorf("the receiver saw %v: a redirect was followed", posts)
	}
}
