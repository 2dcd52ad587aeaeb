package attack

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/service"
)

// Attack (on availability): pause Redis (SIGSTOP) while the API is under
// load (400 requests a second from 16 clients). Answers took up to 198 ms with --store-timeout 50ms (72 ms with
// 20ms): the deadline bounded a batch, not a request, so a request waited
// for a lane and then for its own batch.
// Defence (6.6): every check answers within --store-timeout + 10 ms of its
// arrival, by its limit's failure mode: reads fail open (200, degraded),
// logins fail closed (503). A degraded read forwarded to the upstream
// takes the upstream's time on top; its status is checked, not its time.
//
// The bound is wall-clock time, measured by the client, on a machine other
// tests share (go test runs packages side by side, under -race). So each
// trial measures what the machine itself adds to a wait, as
// bucket/deadline_test.go does: goroutines of this process (the limiter's
// too) sleep for the store timeout over and over during the outage, and
// the most one of them overslept is the trial's noise; so is the slowest
// answer to the control probe (/healthz, which never touches the store),
// as one exchange with the limiter waits for several goroutines to be
// scheduled, not one. Every answer must come within --store-timeout +
// 10 ms + the larger of the two: a late timer or a late exchange explains
// a late answer by exactly its own lateness, no more. A trial with an
// answer past that bound is run again, up to five trials in all (a stall
// between a sleeper's wake-ups and an answer can still fall on one trial);
// the test fails when none was in bound. The old code was late in every
// trial, by 40-150 ms. A wrong status fails at once.
func TestAttackRedisPausedSlowsEveryAnswer(t *testing.T) {
	const trials = 5
	for _, timeout := range []time.Duration{20 * time.Millisecond, 50 * time.Millisecond} {
		t.Run(timeout.String(), func(t *testing.T) {
			var late []string
			for attempt := 1; attempt <= trials; attempt++ {
				r := pausedUnderLoad(t, timeout)
				t.Logf("trial %d, --store-timeout %v, Redis paused: %d answers, worst check %v (forwarded reads %v, health %v), timers overslept up to %v",
					attempt, timeout, r.answers, r.worst, r.forwarded, r.health, r.noise)
				if t.Failed() || r.late == "" {
					return
				}
				late = append(late, fmt.Sprintf("trial %d: %s", attempt, r.late))
			}
			t.Fatalf("late in all %d trials, later than the machine's own timers explain:\n%s", trials, strings.Join(late, "\n"))
		})
	}
}

// probe is one kind of request sent during the outage and the answer it
// must get. A control probe never touches the store; a forwarded one's
// latency includes the upstream's, which the deadline does not bound.
type probe struct {
	name, method, url, body string
	h                       http.Header
	want                    int
	control, forwarded      bool
}

// trial is what one run under a paused Redis measured.
type trial struct {
	answers   int
	worst     time.Duration // the slowest answer of the limiter alone that touched the store
	forwarded time.Duration // the slowest forwarded answer (the upstream's time included)
	noise     time.Duration // the most a sleeper of this process overslept
	health    time.Duration // the slowest control answer
	late      string        // the answers later than the bound ("" when none)
}

// pausedUnderLoad runs one trial; it fails t on a wrong answer.
func pausedUnderLoad(t *testing.T, timeout time.Duration) trial {
	rs := testenv.StartRedis(t)
	tg := start(t, func(c *service.Config) { c.RedisURL = "redis://" + rs.Addr + "/0"; c.StoreTimeout = timeout })
	api := bearer(apiToken)
	probes := []probe{
		{"check read", "POST", tg.api + "/v1/check", `{"endpoint":"GET /feed","ip":"192.0.2.9","user_id":"u1"}`, api, 200, false, false},
		{"check login", "POST", tg.api + "/v1/check", `{"endpoint":"POST /auth/login","ip":"192.0.2.9","account":"a"}`, api, 503, false, false},
		{"proxy read", "GET", tg.public + "/feed", "", from("192.0.2.10"), 200, false, true},
		{"proxy login", "POST", tg.public + "/auth/login", `{"username":"b","password":"right"}`, from("192.0.2.11"), 503, false, false},
		{"health", "GET", tg.api + "/healthz", "", nil, 200, true, false},
	}
	for _, p := range probes[:3] { // warm: connections to Redis and the upstream
		if code, body := do(t, p.method, p.url, p.body, p.h); code != 200 {
			t.Fatalf("%s before the pause: %d %s", p.name, code, body)
		}
	}
	if err := rs.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	pid := rs.Cmd.Process
	t.Cleanup(func() { _ = pid.Signal(syscall.SIGCONT) })

	type answer struct {
		p    *probe
		took time.Duration
		code int
		err  error
	}
	var mu sync.Mutex
	var answers []answer
	// 16 clients at 25 requests a second each, staggered: 400/s, one
	// every 2.5 ms, many in flight at once while Redis holds them.
	stop := time.Now().Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	overslept := make([]time.Duration, 16)
	for i := range overslept { // the control: the same wait, without the store
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				t0 := time.Now()
				time.Sleep(timeout)
				overslept[i] = max(overslept[i], time.Since(t0)-timeout)
			}
		}()
	}
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			time.Sleep(time.Duration(w) * 40 * time.Millisecond / 16)
			tick := time.NewTicker(40 * time.Millisecond)
			defer tick.Stop()
			for i := w; time.Now().Before(stop); i++ {
				<-tick.C
				p := &probes[i%len(probes)]
				req, _ := http.NewRequest(p.method, p.url, strings.NewReader(p.body))
				req.Header = p.h.Clone()
				if req.Header == nil {
					req.Header = http.Header{}
				}
				req.Header.Set("Content-Type", "application/json")
				t0 := time.Now()
				resp, err := client.Do(req)
				a := answer{p: p, err: err}
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					a.code = resp.StatusCode
					if a.code == 200 && !p.control && resp.Header.Get("X-Ratelimit-Degraded") != "1" {
						a.code = -200 // allowed, but not by the failure mode
					}
				}
				a.took = time.Since(t0)
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	r := trial{answers: len(answers)}
	for _, d := range overslept {
		r.noise = max(r.noise, d)
	}
	for _, a := range answers {
		if a.p.control && a.err == nil {
			r.health = max(r.health, a.took)
		}
	}
	bound := timeout + 10*time.Millisecond + max(r.noise, r.health)
	var lateOnes []string
	for _, a := range answers {
		switch {
		case a.err != nil || a.code != a.p.want:
			t.Errorf("%s: status %d (err %v) after %v; want %d (degraded)", a.p.name, a.code, a.err, a.took, a.p.want)
		case a.p.control:
		case a.p.forwarded:
			r.forwarded = max(r.forwarded, a.took)
		default:
			r.worst = max(r.worst, a.took)
			if a.took > bound {
				lateOnes = append(lateOnes, fmt.Sprintf("%s after %v", a.p.name, a.took))
			}
		}
	}
	if len(lateOnes) > 0 {
		r.late = fmt.Sprintf("%d of %d answers later than %v (%s)", len(lateOnes), len(answers), bound, strings.Join(lateOnes[:min(5, len(lateOnes))], ", "))
	}
	return r
}

// rawHTTP writes raw to addr's listener (then keeps the connection open,
// sending nothing more) and reads the response within wait.
func rawHTTP(t *testing.T, base, raw string, wait time.Duration) (*http.Response, string, time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(wait))
	t0 := time.Now()
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer within %v: %v", wait, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), time.Since(t0)
}

// upstreamErrors reads tollgate_proxy_upstream_errors_total from the API port.
func upstreamErrors(t *testing.T, tg *target) string {
	_, body := do(t, "GET", tg.api+"/metrics", "", nil)
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "tollgate_proxy_upstream_errors_total ") {
			return strings.TrimPrefix(l, "tollgate_proxy_upstream_errors_total ")
		}
	}
	return "absent"
}

// Attack (on the operator's alerting): a body with bad chunked encoding
// got 502 UPSTREAM_UNAVAILABLE and counted an upstream error.
// Defence (6.6): a malformed body is the client's fault: 400 envelope.
func TestAttackMalformedChunkedBodyBlamesUpstream(t *testing.T) {
	t.Parallel()
	tg := start(t)
	for _, p := range []string{"/upload", "/auth/login"} {
		raw := "POST " + p + " HTTP/1.1\r\nHost: api\r\nX-Forwarded-For: 198.51.100.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"
		resp, body, _ := rawHTTP(t, tg.public, raw, 5*time.Second)
		if resp.StatusCode != http.StatusBadRequest || code(body) != "BAD_REQUEST" {
			t.Errorf("POST %s with bad chunks: %d %.160s; want 400 BAD_REQUEST", p, resp.StatusCode, body)
		}
	}
	if n := upstreamErrors(t, tg); n != "0" {
		t.Errorf("tollgate_proxy_upstream_errors_total = %s; want 0", n)
	}
}

// Attack (on availability): a body that never arrives held the request
// for 30 s and then got a 502, or no answer at all.
// Defence (6.6): a body not arrived within --body-timeout is 408.
func TestAttackStalledBody(t *testing.T) {
	t.Parallel()
	const bodyTimeout = 300 * time.Millisecond
	tg := start(t, func(c *service.Config) { c.BodyTimeout = bodyTimeout })
	for _, c := range []struct{ name, head, part string }{
		{"length", "POST /upload HTTP/1.1\r\nContent-Length: 100\r\n", "abc"},
		{"chunked", "POST /upload HTTP/1.1\r\nTransfer-Encoding: chunked\r\n", "5\r\nab"},
		{"login", "POST /auth/login HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n", `{"username":`},
	} {
		raw := c.head + "Host: api\r\nX-Forwarded-For: 198.51.100.1\r\n\r\n" + c.part
		resp, body, took := rawHTTP(t, tg.public, raw, 5*time.Second)
		if resp.StatusCode != http.StatusRequestTimeout || code(body) != "REQUEST_TIMEOUT" {
			t.Errorf("%s: %d %.160s; want 408 REQUEST_TIMEOUT", c.name, resp.StatusCode, body)
		}
		if took < bodyTimeout || took > bodyTimeout+time.Second {
			t.Errorf("%s: answered after %v; want soon after %v", c.name, took, bodyTimeout)
		}
	}
	if n := upstreamErrors(t, tg); n != "0" {
		t.Errorf("tollgate_proxy_upstream_errors_total = %s; want 0", n)
	}
}

// Attack (on the NATS server): 67,000 reports in 10 s grew the events
// stream by 18 MB, with no bound.
// Defence (6.6): every stream has a size bound (--events-max-bytes for
// reports and alerts); the oldest events go first.
func TestAttackReportFloodGrowsEventsStream(t *testing.T) {
	t.Parallel()
	const bound = 256 << 10
	tg := start(t, func(c *service.Config) { c.EventsMaxBytes = bound })
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 125; i++ {
				body := fmt.Sprintf(`{"type":"login_failed","account":"flood-%d-%d","ip":"198.51.100.%d"}`, w, i, 1+i%250)
				if code, resp := do(t, "POST", tg.api+"/v1/report", body, bearer(apiToken)); code != 202 {
					t.Errorf("report: %d %s", code, resp)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	js := sharedJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, tg.stream+"_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxBytes != bound || info.State.Bytes > bound {
		t.Fatalf("events stream: max_bytes %d, holds %d bytes after 2000 reports; want max_bytes %d and at most that", info.Config.MaxBytes, info.State.Bytes, bound)
	}
}
