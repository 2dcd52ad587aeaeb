package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
)

// TestMain runs riskd itself instead of the tests when
// TOLLGATE_TEST_HUP_HELPER is 1: the child process the SIGHUP test
// signals, the test binary standing in for the daemon's.
func TestMain(m *testing.M) {
	if os.Getenv("TOLLGATE_TEST_HUP_HELPER") == "1" {
		os.Exit(run(nil, os.LookupEnv, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestSIGHUPReloadsPolicy (contract 3: the policy file is reloaded on
// SIGHUP): riskd rereads its policy file on SIGHUP, as the limiter does,
// and goes on; SIGTERM then stops it with exit 0. Before, riskd did not
// handle SIGHUP and Go's default action killed it: `kill -HUP` (or a
// `systemctl reload` of every tollgate unit, a closed terminal) stopped
// the leading riskd.
func TestSIGHUPReloadsPolicy(t *testing.T) {
	t.Parallel()
	ns := testenv.StartNATS(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	policyPath := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyPath, policy.Example(), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "TOLLGATE_TEST_HUP_HELPER=1", "TOLLGATE_CONFIG="+policyPath,
		"TOLLGATE_REDIS=redis://"+testenv.RedisAddr()+"/0", "TOLLGATE_NATS="+ns.URL, "TOLLGATE_LISTEN="+addr,
		"TOLLGATE_KEY_PREFIX="+testenv.Prefix(t), "TOLLGATE_DECISIONS_MAX_BYTES=16777216", "TOLLGATE_EVENTS_MAX_BYTES=16777216")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	get := func(path string) string {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	testenv.Eventually(t, 20*time.Second, func() string {
		if b := get("/readyz"); !strings.Contains(b, `"status":"ready"`) {
			return "riskd not ready: " + b
		}
		return ""
	})
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The file did not change, so only the SIGHUP reloads it.
	testenv.Eventually(t, 10*time.Second, func() string {
		select {
		case err := <-exited:
			t.Fatalf("riskd stopped on SIGHUP: %v\n%s", err, stderr.String())
		default:
		}
		if b := get("/metrics"); !strings.Contains(b, `tollgate_policy_reloads_total{result="ok"} 1`) {
			return "no reload counted after SIGHUP"
		}
		return ""
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("riskd after SIGTERM: %v, want exit 0\n%s", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("riskd did not stop on SIGTERM")
	}
}
