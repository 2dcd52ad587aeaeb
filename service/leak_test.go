package service

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// The leak tests are not parallel: Go runs them alone, so the goroutines
// of other tests do not count.

// unreachable is an address nothing listens on.
func unreachable(t *testing.T) string {
	t.Helper()
	return testenv.RefusedAddr(t)
}

// touch asks url once without keeping the connection.
func touch(t *testing.T, url string) int {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestLimiterLeavesNoGoroutine (issue 12): a limiter started and stopped,
// in the one-process default, with real Redis and NATS in proxy mode with
// gRPC and pprof, and against an unreachable Redis and NATS, leaves no
// goroutine behind, and stops without an error.
func TestLimiterLeavesNoGoroutine(t *testing.T) {
	stream, subj := testenv.SharedStreams(t)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"one process", Config{}},
		{"redis nats proxy grpc pprof", Config{RedisURL: "redis://" + testenv.RedisAddr() + "/0", KeyPrefix: testenv.Prefix(t),
			NATSURL: testenv.NATSURL(), StreamName: stream, SubjectPrefix: subj, DecisionsMaxBytes: 16 << 20, EventsMaxBytes: 16 << 20,
			Upstream: up, APIListen: "127.0.0.1:0", GRPCListen: "127.0.0.1:0", PprofListen: "127.0.0.1:0"}},
		{"unreachable redis and nats", Config{RedisURL: "redis://" + unreachable(t) + "/0", NATSURL: "nats://" + unreachable(t)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			check := testenv.Goroutines(t)
			cfg := c.cfg
			cfg.Listen, cfg.Logger, cfg.Getenv = "127.0.0.1:0", slog.New(slog.DiscardHandler), testGetenv
			ctx, cancel := context.WithCancel(context.Background())
			r, err := Start(ctx, cfg)
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			if code := touch(t, "http://"+r.Addr+"/readyz"); code != 200 {
				t.Errorf("readyz %d", code)
			}
			if cfg.Upstream != "" {
				touch(t, "http://"+r.Addr+"/feed")
			}
			cancel()
			<-r.Done
			if r.Err != nil {
				t.Errorf("stopped with %v", r.Err)
			}
			check()
		})
	}
}

// TestFailedStartLeavesNoGoroutine: a start of either daemon that fails
// after the store, NATS and the risk daemon were built (the listen
// address taken) releases them all.
func TestFailedStartLeavesNoGoroutine(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	check := testenv.Goroutines(t)
	_, err = Start(context.Background(), Config{Listen: ln.Addr().String(), Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "listen "+ln.Addr().String()) {
		t.Fatalf("start on a taken port: %v", err)
	}
	check()
	// riskd: its Redis client, lanes, NATS connection and publisher were
	// built before the listener (StartRiskd leaked them on this path).
	check = testenv.Goroutines(t)
	_, err = StartRiskd(context.Background(), RiskdConfig{Listen: ln.Addr().String(), RedisURL: "redis://" + testenv.RedisAddr() + "/0",
		KeyPrefix: testenv.Prefix(t), NATSURL: testenv.NATSURL(), Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "listen "+ln.Addr().String()) {
		t.Fatalf("riskd on a taken port: %v", err)
	}
	check()
}

// TestRiskdLeavesNoGoroutine (issue 12): riskd started and stopped, with
// real Redis and NATS (leading) and against an unreachable Redis and
// NATS (standing by), leaves no goroutine behind.
func TestRiskdLeavesNoGoroutine(t *testing.T) {
	stream, subj := testenv.SharedStreams(t)
	for _, c := range []struct {
		name      string
		cfg       RiskdConfig
		wantReady int
	}{
		{"leading", RiskdConfig{RedisURL: "redis://" + testenv.RedisAddr() + "/0", KeyPrefix: testenv.Prefix(t), NATSURL: testenv.NATSURL(),
			StreamName: stream, SubjectPrefix: subj, DecisionsMaxBytes: 16 << 20, EventsMaxBytes: 16 << 20}, 200},
		{"unreachable redis and nats", RiskdConfig{RedisURL: "redis://" + unreachable(t) + "/0", NATSURL: "nats://" + unreachable(t)}, 503},
	} {
		t.Run(c.name, func(t *testing.T) {
			check := testenv.Goroutines(t)
			cfg := c.cfg
			cfg.Listen, cfg.Logger, cfg.LeaseTTL = "127.0.0.1:0", slog.New(slog.DiscardHandler), time.Second
			ctx, cancel := context.WithCancel(context.Background())
			r, err := StartRiskd(ctx, cfg)
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			eventually(t, 10*time.Second, func() string {
				if code := touch(t, "http://"+r.Addr+"/readyz"); code != c.wantReady {
					return "readyz " + strconv.Itoa(code)
				}
				return ""
			})
			cancel()
			<-r.Done
			if r.Err != nil {
				t.Errorf("stopped with %v", r.Err)
			}
			check()
		})
	}
}

// TestOneProcessRiskFailureStopsLimiter (6.7): the one-process limiter's
// risk engine is riskd's component; a consumer deleted under it stops the
// limiter with the consumer's error rather than leave it half-deaf.
func TestOneProcessRiskFailureStopsLimiter(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := Start(ctx, Config{Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	testenv.DeleteConsumer(t, r.NATSURL, "TOLLGATE_EVENTS", "riskd-reports")
	select {
	case <-r.Done:
		if r.Err == nil || !strings.Contains(r.Err.Error(), "risk daemon: risk: consumer riskd-reports") {
			t.Fatalf("stopped with %v, want the reports consumer's error", r.Err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the limiter kept running without its risk engine's reports consumer")
	}
}
