package service

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// logBuffer collects a daemon's JSON log lines; safe for concurrent use.
type logBuffer struct{ testenv.SyncBuffer }

// lines returns the lines that contain every one of subs.
func (l *logBuffer) lines(subs ...string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

// startLogged starts a limiter whose logs (debug and up) go to the
// returned buffer.
func startLogged(t *testing.T, cfg Config) (*Running, string, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	r, err := Start(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		<-r.Done
	})
	return r, "http://" + r.Addr, logs
}

// TestCleanStartNoWarnings: the built-in policy starts without a warning
// (its ASN rule is an example that needs an operator's database).
func TestCleanStartNoWarnings(t *testing.T) {
	t.Parallel()
	_, base, logs := startLogged(t, Config{})
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Fatalf("readyz %d", code)
	}
	if w := logs.lines(`"level":"WARN"`); len(w) != 0 {
		t.Fatalf("warnings on a clean start:\n%s", strings.Join(w, "\n"))
	}
	if e := logs.lines(`"level":"ERROR"`); len(e) != 0 {
		t.Fatalf("errors on a clean start:\n%s", strings.Join(e, "\n"))
	}
}

// TestStartDialsRedisOnce: an unreachable Redis is dialled once at start
// and its real cause logged; the limiter still starts and fail-open
// classes answer degraded, fail-closed ones 503.
func TestStartDialsRedisOnce(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	_, base, logs := startLogged(t, Config{RedisURL: "redis://user:s3cret@" + addr + "/0"})
	got := logs.lines(`"level":"ERROR"`, "redis unreachable at start", "connection refused", `"redis":"redis://***@`+addr+`/0"`)
	if len(got) != 1 {
		t.Fatalf("want one ERROR line with the refused dial, got:\n%s", logs)
	}
	if strings.Contains(logs.String(), "s3cret") {
		t.Fatalf("password in the logs:\n%s", logs)
	}
	resp, _ := post(t, base+"/v1/check", `{"endpoint":"GET /feed","ip":"192.0.2.9","user_id":"u_42"}`)
	if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Degraded") != "1" {
		t.Fatalf("fail-open read: %d degraded %q", resp.StatusCode, resp.Header.Get("X-RateLimit-Degraded"))
	}
	resp, _ = post(t, base+"/v1/check", `{"endpoint":"POST /auth/login","ip":"192.0.2.9","account":"a"}`)
	if resp.StatusCode != 503 {
		t.Fatalf("fail-closed login: %d", resp.StatusCode)
	}
}

// TestStartDialsNATSOnce: an unreachable NATS is dialled once at start and
// its real cause logged, not "outbound buffer limit exceeded"; requests are
// answered all the same.
func TestStartDialsNATSOnce(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	_, base, logs := startLogged(t, Config{NATSURL: "nats://tg:n4tspw@" + addr})
	if got := logs.lines(`"level":"ERROR"`, "nats unreachable at start", "connection refused", addr); len(got) != 1 {
		t.Fatalf("want one ERROR line with the refused dial, got:\n%s", logs)
	}
	if strings.Contains(logs.String(), "n4tspw") {
		t.Fatalf("NATS password in the logs:\n%s", logs)
	}
	if strings.Contains(logs.String(), "outbound buffer limit exceeded") {
		t.Fatalf("misleading cause logged:\n%s", logs)
	}
	if resp, _ := post(t, base+"/v1/check", `{"endpoint":"GET /feed","ip":"192.0.2.9","user_id":"u_42"}`); resp.StatusCode != 200 {
		t.Fatalf("check with NATS down: %d", resp.StatusCode)
	}
}

// TestRiskdDialsOnce: riskd logs the real cause of an unreachable Redis and
// NATS at start.
func TestRiskdDialsOnce(t *testing.T) {
	t.Parallel()
	raddr, naddr := closedAddr(t), closedAddr(t)
	logs := &logBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	r, err := StartRiskd(ctx, RiskdConfig{Listen: "127.0.0.1:0", RedisURL: "redis://:pw@" + raddr + "/0", NATSURL: "nats://" + naddr,
		Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-r.Done })
	for _, want := range [][]string{{"redis unreachable at start", raddr, "connection refused"}, {"nats unreachable at start", naddr, "connection refused"}} {
		if got := logs.lines(append(want, `"level":"ERROR"`)...); len(got) != 1 {
			t.Errorf("want one line with %q, got:\n%s", want, logs)
		}
	}
}

// TestReloadLogsOnce: each reload is one log line (a refused file too), and
// start-up errors carry no repeated prefix.
func TestReloadLogsOnce(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	write := func(rate string) { // atomically: the watcher must not see a half-written file
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte("version: 1\nlimits:\n  - {name: per-ip, by: [ip], rate: "+rate+"}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("10/min")
	_, _, logs := startLogged(t, Config{ConfigPath: path, WatchInterval: 10 * time.Millisecond})
	write("20/min")
	eventually(t, 5*time.Second, func() string {
		if len(logs.lines("reload")) == 0 {
			return "no reload logged"
		}
		return ""
	})
	time.Sleep(100 * time.Millisecond) // ten more watch ticks: nothing more may be logged
	if got := logs.lines("reload"); len(got) != 1 || !strings.Contains(got[0], `"msg":"policy: reloaded"`) {
		t.Fatalf("one reload, log lines:\n%s", strings.Join(got, "\n"))
	}
	write("lots")
	eventually(t, 5*time.Second, func() string {
		if len(logs.lines("reload", `"level":"ERROR"`)) == 0 {
			return "no refusal logged"
		}
		return ""
	})
	time.Sleep(100 * time.Millisecond)
	if got := logs.lines("reload"); len(got) != 2 {
		t.Fatalf("one reload and one refusal, log lines:\n%s", strings.Join(got, "\n"))
	}

	_, err := Start(context.Background(), Config{ConfigPath: filepath.Join(t.TempDir(), "missing.yaml"), Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.HasPrefix(err.Error(), "policy: read config: open ") || strings.Count(err.Error(), "policy:") != 1 {
		t.Fatalf("missing policy: %v", err)
	}
}

// closedAddr returns a loopback address nobody listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
}
