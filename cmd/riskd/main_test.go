package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/service"
)

func envMap(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func runT(env func(string) (string, bool), args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, env, &out, &errb)
	return code, out.String(), errb.String()
}

// TestHelpAndVersion: --help lists every flag with its environment
// variable and an example; --version prints the version; both exit 0.
func TestHelpAndVersion(t *testing.T) {
	t.Parallel()
	code, out, errs := runT(envMap(), "--help")
	if code != 0 || errs != "" || !strings.Contains(out, "riskd --config policy/example.yaml --redis") {
		t.Fatalf("--help: exit %d, stderr %q:\n%s", code, errs, out)
	}
	for _, f := range flags(new(service.RiskdConfig)) {
		found := false
		for _, l := range strings.Split(out, "\n") {
			found = found || (strings.HasPrefix(l, "  --"+f.Name+" ") && strings.Contains(l, " "+f.Env+" "))
		}
		if !found || f.Env == "" {
			t.Errorf("--help: flag --%s without its env var %s", f.Name, f.Env)
		}
	}
	code, out, errs = runT(envMap(), "--version")
	if code != 0 || errs != "" || !strings.HasPrefix(out, "riskd ") || !strings.Contains(out, " revision ") {
		t.Fatalf("--version: exit %d %q %q", code, out, errs)
	}
}

// TestUsageErrors: usage errors exit 2, environment values included.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	ok := []string{"TOLLGATE_REDIS", "redis://127.0.0.1:1/0", "TOLLGATE_NATS", "nats://127.0.0.1:1"}
	for _, c := range []struct {
		name    string
		env     []string
		args    []string
		wantErr string
	}{
		{"no redis or nats", nil, nil, "riskd needs --redis and --nats"},
		{"unknown flag", ok, []string{"--nope"}, "not defined: -nope"},
		{"bad int env", append(ok, "TOLLGATE_DECISIONS_MAX_BYTES", "lots"), nil, `TOLLGATE_DECISIONS_MAX_BYTES="lots"`},
		{"bad redis env", []string{"TOLLGATE_REDIS", "nonsense", "TOLLGATE_NATS", "nats://127.0.0.1:1"}, nil, "neither redis://"},
		{"bad listen", ok, []string{"--listen", "nowhere"}, `listen address "nowhere"`},
		{"stray argument", ok, []string{"run"}, `unexpected argument "run"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, _, errs := runT(envMap(c.env...), c.args...)
			if code != 2 || !strings.Contains(errs, c.wantErr) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errs, c.wantErr)
			}
		})
	}
}

// TestRuntimeFailureExit1: the listen port taken is a run-time failure.
func TestRuntimeFailureExit1(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	code, _, errs := runT(envMap("TOLLGATE_REDIS", "redis://127.0.0.1:1/0", "TOLLGATE_NATS", "nats://127.0.0.1:1"), "--listen", l.Addr().String())
	if code != 1 || !strings.Contains(errs, "listen "+l.Addr().String()) {
		t.Fatalf("exit %d %q", code, errs)
	}
}

// TestConsumerFailureExits1 (6.7, issue 12): a consumer deleted under a
// leading riskd stops the whole process with exit 1, naming the consumer:
// it never runs half-deaf.
func TestConsumerFailureExits1(t *testing.T) {
	t.Parallel()
	ns := testenv.StartNATS(t) // a private server: the default stream names are free
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	env := envMap("TOLLGATE_REDIS", "redis://"+testenv.RedisAddr()+"/0", "TOLLGATE_NATS", ns.URL, "TOLLGATE_LISTEN", addr,
		"TOLLGATE_KEY_PREFIX", testenv.Prefix(t), "TOLLGATE_DECISIONS_MAX_BYTES", "16777216", "TOLLGATE_EVENTS_MAX_BYTES", "16777216")
	type result struct {
		code         int
		stdout, errs string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errs := runT(env)
		done <- result{code, out, errs}
	}()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), `"status":"ready"`) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("riskd not ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	testenv.DeleteConsumer(t, ns.URL, "TOLLGATE_EVENTS", "riskd-reports")
	select {
	case r := <-done:
		if r.code != 1 || !strings.Contains(r.errs, "riskd-reports") {
			t.Fatalf("exit %d, stderr %q; want 1 naming the consumer", r.code, r.errs)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("riskd kept running without its reports consumer")
	}
}

// TestBadNATSNamesAreUsageErrors (6.8): a --durable or --stream-name
// JetStream cannot name a consumer or stream with, or a --subject-prefix
// no subject can start with, is a usage error (exit 2). Before, riskd
// started, its consumers failed and it exited 1, which systemd
// (Restart=on-failure) restarted every 2 s for ever.
func TestBadNATSNamesAreUsageErrors(t *testing.T) {
	t.Parallel()
	ok := []string{"TOLLGATE_REDIS", "redis://127.0.0.1:1/0", "TOLLGATE_NATS", "nats://127.0.0.1:1"}
	for _, c := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"dot in durable", []string{"--durable", "riskd.a"}, `durable "riskd.a"`},
		{"wildcard in stream name", []string{"--stream-name", "TOLL>"}, `stream name "TOLL>"`},
		{"space in subject prefix", []string{"--subject-prefix", "toll gate."}, `subject prefix "toll gate."`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, _, errs := runT(envMap(ok...), c.args...)
			if code != 2 || !strings.Contains(errs, c.wantErr) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errs, c.wantErr)
			}
		})
	}
}
