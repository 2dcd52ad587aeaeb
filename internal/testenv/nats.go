package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSURL is the shared test NATS: $TOLLGATE_TEST_NATS or nats://127.0.0.1:4222.
func NATSURL() string {
	if u := os.Getenv("TOLLGATE_TEST_NATS"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// NATSServer is a private nats-server process with JetStream.
type NATSServer struct {
	URL  string
	Port int
	Cmd  *exec.Cmd
	dir  string
	// extra arguments (a -c config file) and environment of the process
	extra, env []string
}

// StartNATS starts nats-server (JetStream, loopback, free port) as a child
// process and stops it at cleanup. Tests that kill NATS use it.
func StartNATS(t testing.TB) *NATSServer {
	t.Helper()
	s := &NATSServer{dir: t.TempDir()}
	s.Port = FreePort(t)
	s.URL = fmt.Sprintf("nats://127.0.0.1:%d", s.Port)
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func (s *NATSServer) start() error {
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		bin = "/usr/sbin/nats-server"
	}
	args := []string{"-a", "127.0.0.1", "-p", fmt.Sprint(s.Port), "-l", filepath.Join(s.dir, "nats.log")}
	if s.extra == nil {
		args = append(args, "-js", "-sd", s.dir)
	}
	args = append(args, s.extra...)
	cmd := exec.Command(bin, args...)
	if s.env != nil {
		cmd.Env = append(os.Environ(), s.env...)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testenv: start nats-server: %w", err)
	}
	s.Cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.Port), 100*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Stop()
	return fmt.Errorf("testenv: nats-server on port %d did not answer", s.Port)
}

// Stop kills the server by PID; calling it twice is fine.
func (s *NATSServer) Stop() {
	if s.Cmd == nil || s.Cmd.Process == nil {
		return
	}
	_ = s.Cmd.Process.Kill()
	_, _ = s.Cmd.Process.Wait()
	s.Cmd = nil
}

// StartNATSConfig is StartNATS with the configuration file conf (its
// listen address and port overridden for the test; JetStream and its
// store directory are the file's) and
// env (NAME=value) added to the process's environment, for the variables
// the file refers to.
func StartNATSConfig(t testing.TB, conf string, env ...string) *NATSServer {
	t.Helper()
	s := &NATSServer{dir: t.TempDir(), extra: []string{"-c", conf}, env: env}
	s.Port = FreePort(t)
	s.URL = fmt.Sprintf("nats://127.0.0.1:%d", s.Port)
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Restart starts the server again on the same port and store.
func (s *NATSServer) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
}

// SharedStreams returns the stream-name and subject prefixes a test should
// use on the shared NATS server, and deletes the test's streams at cleanup
// (every stream reserves storage on the server).
func SharedStreams(t testing.TB) (streamName, subjectPrefix string) {
	t.Helper()
	id := strings.ToUpper(strings.Trim(Prefix(t), "t:"))
	streamName, subjectPrefix = "T"+id, "t"+strings.ToLower(id)+"."
	t.Cleanup(func() { DeleteStreams(NATSURL(), streamName) })
	return streamName, subjectPrefix
}

// DeleteStreams deletes the streams named name+"_DECISIONS", name+"_EVENTS"
// and name+"_AUDIT".
func DeleteStreams(url, name string) {
	nc, err := nats.Connect(url)
	if err != nil {
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range []string{"_DECISIONS", "_EVENTS", "_AUDIT"} {
		_ = js.DeleteStream(ctx, name+s)
	}
}

// DeleteConsumer deletes the durable consumer name of stream on the NATS
// server at url, as an operator's mistake would, failing t when it cannot.
func DeleteConsumer(t testing.TB, url, stream, name string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteConsumer(context.Background(), stream, name); err != nil {
		t.Fatalf("testenv: delete consumer %s of %s: %v", name, stream, err)
	}
}
