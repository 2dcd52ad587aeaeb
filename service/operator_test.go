package service

import (
	"context"
	"fmt"
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
	// The cause is the dial's: refused, or on a loaded machine the dial's
	// deadline passing first; either way one line per dependency.
	for _, want := range [][]string{{"redis unreachable at start", raddr}, {"nats unreachable at start", naddr}} {
		got := logs.lines(append(want, `"level":"ERROR"`)...)
		if len(got) != 1 {
			t.Errorf("want one line with %q, got:\n%s", want, logs)
			continue
		}
		if !strings.Contains(got[0], "connection refused") && !strings.Contains(got[0], "deadline exceeded") && !strings.Contains(got[0], "i/o timeout") {
			t.Errorf("line %s names no dial failure (refused or timed out)", got[0])
		}
	}
}

// TestReloadLogsOnce: each reload is one log line (a refused file too), and
// start-up errors carry no repeated prefix. The watcher checks the policy
// file and then its list file at every tick, and loads a changed list on
// the second tick that sees it: a list change logged shows that the
// watcher looked at the policy file at least twice more (the positive
// signal before each "nothing more was logged").
func TestReloadLogsOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path, list := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "office.txt")
	atomically := func(file, content string) { // the watcher must not see a half-written file
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write := func(rate string) {
		atomically(path, "version: 1\nlists:\n  office: {file: office.txt, kind: ip}\nlimits:\n  - {name: per-ip, by: [ip], rate: "+rate+"}\n")
	}
	atomically(list, "10.0.0.1\n")
	write("10/min")
	_, _, lb := startLogged(t, Config{ConfigPath: path, WatchInterval: 10 * time.Millisecond})
	entries := 0
	twoMoreTicks := func() {
		t.Helper()
		want := len(lb.lines("policy: list reloaded")) + 1
		entries++
		atomically(list, fmt.Sprintf("10.0.0.1\n192.0.2.%d\n", entries))
		eventually(t, 5*time.Second, func() string {
			if n := len(lb.lines("policy: list reloaded")); n < want {
				return fmt.Sprintf("%d list reloads logged, want %d", n, want)
			}
			return ""
		})
	}
	policyLines := func() []string { return lb.lines(`"msg":"policy: reload`) }
	write("20/min")
	eventually(t, 5*time.Second, func() string {
		if len(policyLines()) == 0 {
			return "no reload logged"
		}
		return ""
	})
	twoMoreTicks()
	if got := policyLines(); len(got) != 1 || !strings.Contains(got[0], `"msg":"policy: reloaded"`) {
		t.Fatalf("one reload, log lines:\n%s", strings.Join(got, "\n"))
	}
	write("lots")
	eventually(t, 5*time.Second, func() string {
		if len(lb.lines(`"msg":"policy: reload`, `"level":"ERROR"`)) == 0 {
			return "no refusal logged"
		}
		return ""
	})
	twoMoreTicks()
	if got := policyLines(); len(got) != 2 {
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
