package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// TestMain runs the limiter itself instead of the tests when
// TOLLGATE_TEST_HUP_HELPER is 1: the child process the SIGHUP test
// signals, the test binary standing in for the daemon's.
func TestMain(m *testing.M) {
	if os.Getenv("TOLLGATE_TEST_HUP_HELPER") == "1" {
		os.Exit(run(nil, os.LookupEnv, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestSIGHUPWhileStartingIsNotFatal: a SIGHUP that reaches the limiter
// while it starts (a `systemctl reload` right after a start, while the
// start waits up to 2 s on an unanswering Redis) neither kills it nor is
// lost: the limiter starts and serves. Before, SIGHUP was handled only
// once the start had returned, and until then Go's default action for it
// ended the process.
func TestSIGHUPWhileStartingIsNotFatal(t *testing.T) {
	t.Parallel()
	// A Redis that accepts connections and never answers: the start's
	// one dial waits out its 2 s.
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hang.Close() })
	dialed := make(chan struct{}, 64)
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			dialed <- struct{}{}
		}
	}()
	stream, subj := testenv.SharedStreams(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "TOLLGATE_TEST_HUP_HELPER=1", "TOLLGATE_LISTEN="+addr,
		"TOLLGATE_REDIS=redis://"+hang.Addr().String()+"/0", "TOLLGATE_NATS="+testenv.NATSURL(),
		"TOLLGATE_STREAM_NAME="+stream, "TOLLGATE_SUBJECT_PREFIX="+subj,
		"TOLLGATE_DECISIONS_MAX_BYTES=16777216", "TOLLGATE_EVENTS_MAX_BYTES=16777216")
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
	select {
	case <-dialed: // the start is under way, waiting on Redis
	case err := <-exited:
		t.Fatalf("limiter exited before dialing Redis: %v\n%s", err, stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatal("the limiter never dialed Redis")
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() string {
		select {
		case err := <-exited:
			t.Fatalf("limiter stopped on a SIGHUP while starting: %v\n%s", err, stderr.String())
		default:
		}
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return "not serving: " + err.Error()
		}
		resp.Body.Close()
		return ""
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("limiter after SIGTERM: %v, want exit 0\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("limiter did not stop on SIGTERM")
	}
}
