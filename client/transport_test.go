package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/client"
)

// reply is one scripted server answer.
type reply struct {
	status int
	header map[string]string
	body   string
}

// envelope renders a RATE_LIMITED envelope with retry_after_ms.
func envelope(ms string) string {
	return `{"error":{"code":"RATE_LIMITED","message":"Too many requests","details":{"retry_after_ms":` + ms +
		`,"limit":"login-ip","scope":"ip"},"request_id":"01HX7ABC"}}` + "\n"
}

// scripted serves the replies in order (the last one repeats) and records
// each request's method and body.
type scripted struct {
	mu      sync.Mutex
	replies []reply
	bodies  []string
	methods []string
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	i := min(len(s.bodies), len(s.replies)-1)
	s.bodies = append(s.bodies, string(b))
	s.methods = append(s.methods, r.Method)
	rep := s.replies[i]
	s.mu.Unlock()
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(rep.status)
	_, _ = io.WriteString(w, rep.body)
}

func (s *scripted) hits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.bodies)
}

// tracked records what happened to each response body the base returned.
type tracked struct {
	io.ReadCloser
	eof, closed bool
}

func (b *tracked) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *tracked) Close() error {
	b.closed = true
	return b.ReadCloser.Close()
}

// tracker is a base RoundTripper that wraps every response body.
type tracker struct {
	base   http.RoundTripper
	mu     sync.Mutex
	bodies []*tracked
	after  func() // called after each response arrives
}

func (tr *tracker) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := tr.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	b := &tracked{ReadCloser: resp.Body}
	resp.Body = b
	tr.mu.Lock()
	tr.bodies = append(tr.bodies, b)
	tr.mu.Unlock()
	if tr.after != nil {
		tr.after()
	}
	return resp, nil
}

// seq returns a Rand that yields vals in order, repeating the last.
func seq(vals ...float64) func() float64 {
	var mu sync.Mutex
	i := 0
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		v := vals[min(i, len(vals)-1)]
		i++
		return v
	}
}

// sleeps records the waits asked of the Sleep seam without waiting.
type sleeps struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waits = append(s.waits, d)
	s.mu.Unlock()
	return ctx.Err()
}

func TestTransportRetries(t *testing.T) {
	t.Parallel()
	date := time.Date(2025, 4, 19, 10, 0, 0, 0, time.UTC)
	ok := reply{status: 200, body: `{"ok":true}`}
	tooMany := func(ms string) reply {
		return reply{status: 429, header: map[string]string{"Content-Type": "application/json"}, body: envelope(ms)}
	}
	type tc struct {
		name      string
		replies   []reply
		tr        client.Transport // Base, Sleep are filled in
		rand      []float64
		method    string
		header    map[string]string
		body      string
		opaque    bool // body without GetBody
		wantWaits []time.Duration
		wantHits  int
		wantCode  int
	}
	cases := []tc{
		{name: "retry_after_ms then ok, jitter on top", replies: []reply{tooMany("1800"), ok}, rand: []float64{0.5},
			wantWaits: []time.Duration{1900 * time.Millisecond}, wantHits: 2, wantCode: 200},
		{name: "retry_after_ms preferred over Retry-After",
			replies: []reply{{status: 429, header: map[string]string{"Retry-After": "5"}, body: envelope("1800")}, ok}, rand: []float64{0.5},
			wantWaits: []time.Duration{1900 * time.Millisecond}, wantHits: 2, wantCode: 200},
		{name: "Retry-After seconds only",
			replies: []reply{{status: 429, header: map[string]string{"Retry-After": "3"}, body: "slow down"}, ok}, rand: []float64{0.5},
			wantWaits: []time.Duration{3100 * time.Millisecond}, wantHits: 2, wantCode: 200},
		{name: "Retry-After HTTP date from the server's Date",
			replies: []reply{{status: 429, header: map[string]string{
				"Date": date.Format(http.TimeFormat), "Retry-After": date.Add(7 * time.Second).Format(http.TimeFormat)}}, ok},
			rand: []float64{0.5}, wantWaits: []time.Duration{7100 * time.Millisecond}, wantHits: 2, wantCode: 200},
		{name: "no server time: full jitter doubling", replies: []reply{{status: 429}}, rand: []float64{0.5, 0.25, 0.999},
			wantWaits: []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 799200 * time.Microsecond}, wantHits: 4, wantCode: 429},
		{name: "jitter adds to a short server time", replies: []reply{tooMany("50"), ok}, rand: []float64{0.9},
			wantWaits: []time.Duration{230 * time.Millisecond}, wantHits: 2, wantCode: 200},
		{name: "jitter zero still waits the server time", replies: []reply{tooMany("1800"), tooMany("2500"), ok}, rand: []float64{0},
			wantWaits: []time.Duration{1800 * time.Millisecond, 2500 * time.Millisecond}, wantHits: 3, wantCode: 200},
		{name: "MaxDelay caps the backoff", replies: []reply{{status: 429}},
			tr: client.Transport{BaseDelay: time.Second, MaxDelay: 3 * time.Second, MaxAttempts: 5}, rand: []float64{0.5},
			wantWaits: []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 1500 * time.Millisecond}, wantHits: 5, wantCode: 429},
		{name: "MaxDelay does not shorten the server time", replies: []reply{tooMany("1800"), ok},
			tr: client.Transport{MaxDelay: time.Second}, rand: []float64{0.999},
			wantWaits: []time.Duration{1999800 * time.Microsecond}, wantHits: 2, wantCode: 200},
		{name: "gives up after MaxAttempts with the last 429", replies: []reply{tooMany("100"), tooMany("100"), tooMany("120")},
			tr: client.Transport{MaxAttempts: 3}, rand: []float64{0},
			wantWaits: []time.Duration{100 * time.Millisecond, 100 * time.Millisecond}, wantHits: 3, wantCode: 429},
		{name: "MaxAttempts 1 disables retries", replies: []reply{tooMany("100"), ok}, tr: client.Transport{MaxAttempts: 1},
			rand: []float64{0}, wantHits: 1, wantCode: 429},
		{name: "server time over MaxWait returns the 429", replies: []reply{tooMany("120000"), ok}, rand: []float64{0},
			wantHits: 1, wantCode: 429},
		{name: "server time over custom MaxWait", replies: []reply{{status: 429, header: map[string]string{"Retry-After": "6"}}, ok},
			tr: client.Transport{MaxWait: 5 * time.Second}, rand: []float64{0}, wantHits: 1, wantCode: 429},
		{name: "server time equal to MaxWait is honoured", replies: []reply{tooMany("5000"), ok},
			tr: client.Transport{MaxWait: 5 * time.Second}, rand: []float64{0},
			wantWaits: []time.Duration{5 * time.Second}, wantHits: 2, wantCode: 200},
		{name: "503 retried with RetryOn503", tr: client.Transport{RetryOn503: true},
			replies: []reply{{status: 503, header: map[string]string{"Retry-After": "1"},
				body: `{"error":{"code":"LIMITER_UNAVAILABLE","message":"Rate limiter unavailable","details":{"retry_after_ms":1000},"request_id":"x"}}`}, ok},
			rand: []float64{0.5}, wantWaits: []time.Duration{1100 * time.Millisecond}, wantHits: 2, wantCode: 200},
		{name: "503 not retried by the zero value", replies: []reply{{status: 503, header: map[string]string{"Retry-After": "1"}}, ok},
			rand: []float64{0.5}, wantHits: 1, wantCode: 503},
		{name: "500 not retried", tr: client.Transport{RetryOn503: true}, replies: []reply{{status: 500}, ok},
			rand: []float64{0.5}, wantHits: 1, wantCode: 500},
		{name: "403 STEP_UP_REQUIRED not retried", tr: client.Transport{RetryOn503: true},
			replies: []reply{{status: 403, body: `{"error":{"code":"STEP_UP_REQUIRED"}}`}, ok}, rand: []float64{0.5}, wantHits: 1, wantCode: 403},
		{name: "POST without Idempotency-Key not retried", method: "POST", body: "payload",
			replies: []reply{tooMany("100"), ok}, rand: []float64{0}, wantHits: 1, wantCode: 429},
		{name: "POST with Idempotency-Key retried with the same body", method: "POST", body: "payload",
			header: map[string]string{"Idempotency-Key": "k1"}, replies: []reply{tooMany("100"), tooMany("100"), ok}, rand: []float64{0},
			wantWaits: []time.Duration{100 * time.Millisecond, 100 * time.Millisecond}, wantHits: 3, wantCode: 200},
		{name: "PUT retried with the same body", method: "PUT", body: "payload",
			replies: []reply{tooMany("100"), ok}, rand: []float64{0},
			wantWaits: []time.Duration{100 * time.Millisecond}, wantHits: 2, wantCode: 200},
		{name: "body without GetBody not retried", method: "PUT", body: "payload", opaque: true,
			replies: []reply{tooMany("100"), ok}, rand: []float64{0}, wantHits: 1, wantCode: 429},
		{name: "429 ACCOUNT_LOCKED not retried, however short the lockout left", method: "POST", body: `{"username":"alice","password":"x"}`,
			header: map[string]string{"Idempotency-Key": "k2"},
			replies: []reply{{status: 429, header: map[string]string{"Retry-After": "20"},
				body: `{"error":{"code":"ACCOUNT_LOCKED","message":"Account temporarily locked","details":{"retry_after_ms":20000,"limit":"account-failures","scope":"account"},"request_id":"x"}}`}, ok},
			rand: []float64{0.5}, wantHits: 1, wantCode: 429},
		{name: "429 ACCOUNT_LOCKED of a GET not retried",
			replies: []reply{{status: 429, body: `{"error":{"code":"ACCOUNT_LOCKED","details":{"retry_after_ms":500}}}`}, ok},
			tr:      client.Transport{RetryOn503: true}, rand: []float64{0.5}, wantHits: 1, wantCode: 429},
		{name: "DELETE without body retried", method: "DELETE",
			replies: []reply{tooMany("100"), ok}, rand: []float64{0},
			wantWaits: []time.Duration{100 * time.Millisecond}, wantHits: 2, wantCode: 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := &scripted{replies: c.replies}
			hs := httptest.NewServer(srv)
			t.Cleanup(hs.Close)
			tr := &tracker{base: hs.Client().Transport}
			var sl sleeps
			rt := c.tr
			rt.Base, rt.Sleep, rt.Rand = tr, sl.sleep, seq(c.rand...)

			method := c.method
			if method == "" {
				method = "GET"
			}
			var body io.Reader
			if c.body != "" {
				body = strings.NewReader(c.body)
			}
			req, err := http.NewRequest(method, hs.URL+"/x", body)
			if err != nil {
				t.Fatal(err)
			}
			if c.opaque {
				req.Body, req.GetBody = io.NopCloser(strings.NewReader(c.body)), nil
			}
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()

			if resp.StatusCode != c.wantCode {
				t.Errorf("status %d, want %d", resp.StatusCode, c.wantCode)
			}
			if !slices.Equal(sl.waits, c.wantWaits) {
				t.Errorf("waits %v, want %v", sl.waits, c.wantWaits)
			}
			if h := srv.hits(); h != c.wantHits {
				t.Errorf("server hits %d, want %d", h, c.wantHits)
			}
			// The final response arrives intact.
			last := c.replies[min(c.wantHits, len(c.replies))-1]
			if string(got) != last.body {
				t.Errorf("final body %q, want %q", got, last.body)
			}
			for i, b := range srv.bodies {
				if b != c.body {
					t.Errorf("attempt %d sent body %q, want %q", i, b, c.body)
				}
				if srv.methods[i] != method {
					t.Errorf("attempt %d method %s, want %s", i, srv.methods[i], method)
				}
			}
			// Every retried response was drained and closed.
			for i, b := range tr.bodies[:len(tr.bodies)-1] {
				if !b.eof || !b.closed {
					t.Errorf("retried response %d: drained %v closed %v", i, b.eof, b.closed)
				}
			}
		})
	}
}

// TestTransportCancelMidWait cancels the request's context while the
// default Sleep waits out a 30 s retry_after_ms: RoundTrip returns at once.
func TestTransportCancelMidWait(t *testing.T) {
	t.Parallel()
	srv := &scripted{replies: []reply{{status: 429, body: envelope("30000")}, {status: 200}}}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr := &tracker{base: hs.Client().Transport, after: cancel}
	rt := client.NewTransport(tr)
	req, _ := http.NewRequestWithContext(ctx, "GET", hs.URL, nil)
	start := time.Now()
	resp, err := rt.RoundTrip(req)
	if !errors.Is(err, context.Canceled) || resp != nil {
		t.Fatalf("RoundTrip = %v, %v; want context.Canceled", resp, err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("returned after %v, not promptly", el)
	}
	if srv.hits() != 1 {
		t.Errorf("server hits %d, want 1", srv.hits())
	}
	if b := tr.bodies[0]; !b.closed {
		t.Error("the 429's body was not closed")
	}
}

// TestTransportCancelInjectedSleep: a Sleep seam that reports the
// cancellation makes RoundTrip return ctx.Err() without another attempt.
func TestTransportCancelInjectedSleep(t *testing.T) {
	t.Parallel()
	srv := &scripted{replies: []reply{{status: 429, body: envelope("1800")}, {status: 200}}}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var asked time.Duration
	rt := &client.Transport{Base: hs.Client().Transport, Rand: seq(0), Sleep: func(ctx context.Context, d time.Duration) error {
		asked = d
		cancel() // the user gives up while we wait
		<-ctx.Done()
		return ctx.Err()
	}}
	req, _ := http.NewRequestWithContext(ctx, "GET", hs.URL, nil)
	if _, err := rt.RoundTrip(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if asked != 1800*time.Millisecond || srv.hits() != 1 {
		t.Errorf("asked %v hits %d, want 1.8s and 1", asked, srv.hits())
	}
}

// TestTransportDeadline: when the context's deadline comes before the
// server's time, the 429 is returned at once instead of waiting in vain.
func TestTransportDeadline(t *testing.T) {
	t.Parallel()
	srv := &scripted{replies: []reply{{status: 429, body: envelope("7200000")}, {status: 200}}}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	var sl sleeps
	rt := &client.Transport{Base: hs.Client().Transport, MaxWait: 3 * time.Hour, Rand: seq(0), Sleep: sl.sleep}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", hs.URL, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 429 || string(body) != envelope("7200000") || len(sl.waits) != 0 || srv.hits() != 1 {
		t.Errorf("status %d body %q waits %v hits %d", resp.StatusCode, body, sl.waits, srv.hits())
	}
}

// TestTransportWithClient drives the Transport through an http.Client,
// which is how apps use it.
func TestTransportWithClient(t *testing.T) {
	t.Parallel()
	limited := reply{status: 429, header: map[string]string{"Retry-After": "2"}}
	srv := &scripted{replies: []reply{limited, limited, {status: 200, body: "ok"}}}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	var sl sleeps
	rt := client.NewTransport(hs.Client().Transport)
	rt.Sleep, rt.Rand = sl.sleep, seq(0.5)
	c := &http.Client{Transport: rt}
	resp, err := c.Post(hs.URL, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 429 {
		t.Errorf("POST without Idempotency-Key: status %d, want the 429", resp.StatusCode)
	}
	resp, err = c.Get(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "ok" || !slices.Equal(sl.waits, []time.Duration{2100 * time.Millisecond}) {
		t.Errorf("GET: status %d body %q waits %v", resp.StatusCode, b, sl.waits)
	}
	c.CloseIdleConnections()
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	date := time.Date(2025, 4, 19, 10, 0, 0, 0, time.UTC)
	big := `{"error":{"details":{"retry_after_ms":5},"pad":"` + strings.Repeat("x", 70<<10) + `"}}`
	cases := []struct {
		name   string
		header map[string]string
		body   string
		want   time.Duration
		wantOK bool
	}{
		{name: "envelope ms", body: envelope("1800"), want: 1800 * time.Millisecond, wantOK: true},
		{name: "envelope ms beats header", header: map[string]string{"Retry-After": "9"}, body: envelope("1800"), want: 1800 * time.Millisecond, wantOK: true},
		{name: "envelope zero", body: envelope("0"), want: 0, wantOK: true},
		{name: "envelope negative", body: envelope("-5"), want: 0, wantOK: true},
		{name: "envelope fraction", body: envelope("12.5"), want: 12500 * time.Microsecond, wantOK: true},
		{name: "envelope huge", body: envelope("1e300"), want: time.Duration(1<<63 - 1), wantOK: true},
		{name: "envelope string ms falls back to header", header: map[string]string{"Retry-After": "2"}, body: envelope(`"1800"`), want: 2 * time.Second, wantOK: true},
		{name: "envelope without ms", body: `{"error":{"code":"STEP_UP_REQUIRED","details":{}}}`},
		{name: "envelope without ms, header", header: map[string]string{"Retry-After": "4"}, body: `{"error":{"details":{}}}`, want: 4 * time.Second, wantOK: true},
		{name: "text body, header", header: map[string]string{"Retry-After": "1"}, body: "Too Many Requests", want: time.Second, wantOK: true},
		{name: "header with spaces", header: map[string]string{"Retry-After": " 120 "}, want: 2 * time.Minute, wantOK: true},
		{name: "header date", header: map[string]string{"Date": date.Format(http.TimeFormat), "Retry-After": date.Add(90 * time.Second).Format(http.TimeFormat)}, want: 90 * time.Second, wantOK: true},
		{name: "header date in the past", header: map[string]string{"Date": date.Format(http.TimeFormat), "Retry-After": date.Add(-time.Minute).Format(http.TimeFormat)}, want: 0, wantOK: true},
		{name: "header negative", header: map[string]string{"Retry-After": "-1"}},
		{name: "header decimal", header: map[string]string{"Retry-After": "1.5"}},
		{name: "header garbage", header: map[string]string{"Retry-After": "soon"}},
		{name: "nothing"},
		{name: "body over 64 KiB not parsed", body: big},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			resp := &http.Response{Header: http.Header{}, Body: http.NoBody}
			for k, v := range c.header {
				resp.Header.Set(k, v)
			}
			if c.body != "" {
				resp.Body = io.NopCloser(strings.NewReader(c.body))
			}
			got, ok := client.RetryAfter(resp)
			if got != c.want || ok != c.wantOK {
				t.Errorf("RetryAfter = %v, %v; want %v, %v", got, ok, c.want, c.wantOK)
			}
			b, err := io.ReadAll(resp.Body)
			if err != nil || string(b) != c.body {
				t.Errorf("body after RetryAfter: %d bytes, err %v; want the %d bytes intact", len(b), err, len(c.body))
			}
		})
	}
	if d, ok := client.RetryAfter(nil); d != 0 || ok {
		t.Errorf("RetryAfter(nil) = %v, %v", d, ok)
	}
}

func TestReplayable(t *testing.T) {
	t.Parallel()
	mk := func(method, body string, key bool) *http.Request {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		r, _ := http.NewRequest(method, "http://example.test/", rd)
		if key {
			r.Header.Set("Idempotency-Key", "k")
		}
		return r
	}
	opaque := mk("PUT", "x", false)
	opaque.GetBody = nil
	cases := []struct {
		name string
		req  *http.Request
		want bool
	}{
		{"GET", mk("GET", "", false), true},
		{"HEAD", mk("HEAD", "", false), true},
		{"OPTIONS", mk("OPTIONS", "", false), true},
		{"PUT with body", mk("PUT", "x", false), true},
		{"DELETE", mk("DELETE", "", false), true},
		{"POST", mk("POST", "x", false), false},
		{"PATCH", mk("PATCH", "x", false), false},
		{"POST with Idempotency-Key", mk("POST", "x", true), true},
		{"PATCH with Idempotency-Key", mk("PATCH", "x", true), true},
		{"PUT without GetBody", opaque, false},
	}
	for _, c := range cases {
		if got := client.Replayable(c.req); got != c.want {
			t.Errorf("%s: Replayable = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestBackoffBounds(t *testing.T) {
	t.Parallel()
	for _, r := range []float64{0, 0.3, 0.999999, 1, 2, -1} {
		tr := &client.Transport{BaseDelay: 100 * time.Millisecond, MaxDelay: 5 * time.Second, Rand: seq(r)}
		for attempt := 0; attempt < 80; attempt++ {
			capped := min(100*time.Millisecond<<min(attempt, 20), 5*time.Second)
			if d := tr.Backoff(attempt); d < 0 || d > capped {
				t.Fatalf("rand %v attempt %d: backoff %v outside [0, %v]", r, attempt, d, capped)
			}
		}
	}
	// The default Rand stays within the bounds too.
	tr := &client.Transport{}
	for attempt := 0; attempt < 10; attempt++ {
		if d := tr.Backoff(attempt); d < 0 || d > min(client.DefaultBaseDelay<<attempt, client.DefaultMaxDelay) {
			t.Fatalf("attempt %d: backoff %v out of bounds", attempt, d)
		}
	}
}

// TestTransportSpreadsACrowd: a crowd of clients all told "1800 ms" (or
// "1000 ms" by a limiter whose store is down) at the same moment must not
// all come back at the same instant: every wait is at least the server's
// time, and the waits spread over the jitter above it.
func TestTransportSpreadsACrowd(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status int
		ms     string
		server time.Duration
	}{{429, "1800", 1800 * time.Millisecond}, {503, "1000", time.Second}} {
		tr := client.NewTransport(nil) // the default Rand and delays
		for attempt := 0; attempt < 3; attempt++ {
			lo, hi := time.Duration(1<<62), time.Duration(0)
			for i := 0; i < 1000; i++ {
				resp := &http.Response{StatusCode: c.status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(envelope(c.ms)))}
				d, ok := tr.Wait(resp, attempt)
				if !ok {
					t.Fatalf("%d: Wait gave up", c.status)
				}
				lo, hi = min(lo, d), max(hi, d)
			}
			if lo < c.server {
				t.Fatalf("%d attempt %d: a wait of %v, before the server's %v", c.status, attempt, lo, c.server)
			}
			// the jitter's cap is 200ms << attempt: most of it should be used
			if spread := hi - lo; spread < (client.DefaultBaseDelay<<attempt)/2 {
				t.Errorf("%d attempt %d: 1000 clients told %v come back within %v of each other (waits %v..%v)",
					c.status, attempt, c.server, spread, lo, hi)
			}
		}
	}
}
