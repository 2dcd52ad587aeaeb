package middleware_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/middleware"
)

// fakeClock is a clock a test moves by hand; safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestClockDatesDeviceTokens: direct mode checks a device token's expiry
// against Options.Now, not the wall clock.
func TestClockDatesDeviceTokens(t *testing.T) {
	t.Parallel()
	tokens, err := attestation.NewTokens([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1713522600, 0)
	clock := &fakeClock{t: t0}
	tok := tokens.Issue("d1", t0.Add(time.Hour))
	h, _ := build(t, middleware.Options{Engine: directEngine(t, tokenPolicy, t0), DeviceTokens: tokens, Identify: identifyToken, Now: clock.now})
	for _, s := range []struct {
		step time.Duration
		want string
	}{
		{0, "20"},                        // verified: 10/min × 2
		{59 * time.Minute, "20"},         // still before the expiry
		{time.Minute + time.Second, "5"}, // expired: 10/min × 0.5
	} {
		clock.add(s.step)
		w := serve(h, "GET", "/x", "198.51.100.7", "", "X-Device-Id", "d1", "X-Device-Token", tok)
		if got := field(w.Header(), "X-RateLimit-Limit"); got != s.want {
			t.Errorf("at %v: limit %s, want %s", clock.now().Sub(t0), got, s.want)
		}
	}
}

// TestClockSpacesFailureLogs: remote mode logs a failing limiter at most
// once a second of Options.Now, counting the lines it suppressed.
func TestClockSpacesFailureLogs(t *testing.T) {
	t.Parallel()
	var (
		mu  sync.Mutex
		buf bytes.Buffer
	)
	log := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &buf}, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == "err" || a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	clock := &fakeClock{t: time.Unix(1713522600, 0)}
	url := startFake(t, &fakeLimiter{status: 500, body: "boom"})
	h, _ := build(t, middleware.Options{LimiterURL: url, FailOpen: true, Timeout: 5 * time.Second, Logger: log, Now: clock.now})
	for _, step := range []time.Duration{0, 0, 999 * time.Millisecond, time.Millisecond} {
		clock.add(step)
		serve(h, "GET", "/x", "198.51.100.7", "rid-1")
	}
	mu.Lock()
	defer mu.Unlock()
	line := `level=WARN msg="limiter unavailable" component=middleware request_id=rid-1 fail_open=true suppressed=`
	want := line + "0\n" + line + "2\n"
	if got := buf.String(); got != want {
		t.Errorf("log:\n%s\nwant:\n%s", got, want)
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
