package attack

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/service"
	"github.com/tollgate-dev/tollgate/streams"
)

// decisionsOn counts the decisions in tg's decisions stream whose endpoint
// starts with prefix, and the largest endpoint of any decision there.
func decisionsOn(t *testing.T, tg *target, prefix string) (n, longest int) {
	t.Helper()
	js := sharedJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := js.OrderedConsumer(ctx, tg.stream+"_DECISIONS", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		batch, err := c.FetchNoWait(100)
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			var b streams.DecisionBatch
			if err := streams.DecodeDecisionBatch(msg.Data(), &b); err != nil {
				t.Fatalf("decision batch on %s: %v", msg.Subject(), err)
			}
			for _, d := range b.Decisions {
				if strings.HasPrefix(d.Endpoint, prefix) {
					n++
				}
				longest = max(longest, len(d.Endpoint))
			}
		}
		if got == 0 {
			return n, longest
		}
	}
}

// Attack: the attacker sends requests whose path is 60 KiB long (under
// the 64 KiB header limit), from a few addresses, among other clients'
// requests. Each one's
// decision event was as large as its path; 256 events share one NATS
// message, the message passed NATS's max_payload and the publisher
// dropped the whole batch: other clients' decisions (which riskd's
// signals and the offenders list read) vanished with the attacker's
// (the reviewer counted 258 dropped after 100 long requests among 500).
// Defence: proxy mode refuses an endpoint over 2048 bytes as the check
// API does (400 BAD_REQUEST naming the path), before deciding: nothing
// is published or forwarded for it, and every other client's decision
// is published.
func TestAttackLongPathsDropOthersDecisions(t *testing.T) {
	t.Parallel()
	tg := start(t)
	const short, long = 500, 100
	longPath := "/long/" + strings.Repeat("a", 60<<10)
	var wg sync.WaitGroup
	errs := make(chan string, short+long)
	sem := make(chan struct{}, 16) // in flight at once: a small test machine
	for i := 0; i < short+long; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			path, xff := fmt.Sprintf("/short/%d", i), fmt.Sprintf("198.51.%d.%d", 100+i/200, 1+i%200)
			if i%6 == 5 {
				path, xff = longPath, fmt.Sprintf("203.0.113.%d", i%4)
			}
			code, body, err := send("GET", tg.public+path, from(xff))
			switch {
			case err != nil:
				errs <- err.Error()
			case path == longPath && (code != 400 || !strings.Contains(body, "the request path")):
				errs <- fmt.Sprintf("long path: %d %.200s", code, body)
			case path != longPath && code != 200:
				errs <- fmt.Sprintf("%s: %d %s", path, code, body)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if n := tg.up.reached("GET " + longPath); n != 0 {
		t.Errorf("%d long paths reached the upstream", n)
	}
	var n, longest int
	eventually(t, 10*time.Second, func() string {
		if n, longest = decisionsOn(t, tg, "GET /short/"); n < short {
			return fmt.Sprintf("%d of the %d short requests' decisions published", n, short)
		}
		return ""
	})
	if longest > 2048 {
		t.Fatalf("a decision of a %d-byte endpoint was published", longest)
	}
	if _, body := do(t, "GET", tg.api+"/metrics", "", nil); strings.Contains(body, "\ntollgate_events_dropped_total ") &&
		!strings.Contains(body, "\ntollgate_events_dropped_total 0\n") {
		t.Fatalf("events dropped:\n%s", grepLine(body, "tollgate_events_dropped_total"))
	}
}

// send is do for other goroutines than the test's: it returns the error.
func send(method, url string, h http.Header) (int, string, error) {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header = h
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// grepLine returns the lines of text that contain s.
func grepLine(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Attack: a client behind the load balancer writes its own
// X-Forwarded-For entries (an "internal" address, a victim's) before the
// one the load balancer appends. The limiter decided on the right
// address, but forwarded the client's entries and dropped the trusted
// hops, so an upstream that reads the left-most entry (many frameworks
// do) logged, allow-listed or limited the address the attacker chose.
// Defence: the upstream receives the client address the limiter decided
// on, then the trusted hops and the peer; nothing the client wrote left
// of its own entry.
func TestAttackForwardedForSpoofReachesUpstream(t *testing.T) {
	t.Parallel()
	seen := make(chan []string, 10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Values("X-Forwarded-For")
	}))
	t.Cleanup(up.Close)
	tg := start(t, func(c *service.Config) { c.Upstream = up.URL })
	for _, tt := range []struct{ xff, want string }{
		// the attacker's entries, then the load balancer's (127.0.0.1 dials)
		{"10.0.0.1, 192.0.2.50, 203.0.113.77", "203.0.113.77, 127.0.0.1"},
		{"127.0.0.1, 203.0.113.78, 127.0.0.9", "203.0.113.78, 127.0.0.9, 127.0.0.1"},
	} {
		if code, body := do(t, "GET", tg.public+"/feed", "", from(tt.xff)); code != 200 {
			t.Fatalf("%q: %d %s", tt.xff, code, body)
		}
		if got := <-seen; len(got) != 1 || got[0] != tt.want {
			t.Errorf("sent %q: upstream got X-Forwarded-For %q, want %q", tt.xff, got, tt.want)
		}
	}
}
