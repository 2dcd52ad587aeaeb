package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	exited     chan struct{} // closed once the process has exited and been reaped
}

// StartNATS starts nats-server (JetStream, loopback, free port) as a child
// process and stops it at cleanup. Tests that kill NATS use it.
func StartNATS(t testing.TB) *NATSServer {
	t.Helper()
	s := &NATSServer{dir: t.TempDir()}
	s.startOnFreePort(t)
	return s
}

// startOnFreePort starts s on a free port, trying another when the server
// exits at once (a port free a moment ago can be taken by a parallel
// test's server before this one binds it), and stops it at cleanup.
func (s *NATSServer) startOnFreePort(t testing.TB) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		s.Port = FreePort(t)
		s.URL = fmt.Sprintf("nats://127.0.0.1:%d", s.Port)
		err := s.start()
		if err == nil {
			break
		}
		if !errors.Is(err, errExited) || attempt == 4 {
			t.Fatal(err)
		}
	}
	t.Cleanup(s.Stop)
}

// errExited is a server that exited before it answered.
var errExited = errors.New("exited before it answered")

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
	s.Cmd, s.exited = cmd, make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(s.exited)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			s.Cmd = nil
			return fmt.Errorf("testenv: nats-server on port %d %w; its log:\n%s", s.Port, errExited, s.log())
		default:
		}
		if s.answers() {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Stop()
	return fmt.Errorf("testenv: nats-server on port %d did not answer within 10s; its log:\n%s", s.Port, s.log())
}

// answers reports whether a NATS server answers on s's port: it greets a
// connection with its INFO line (a port that another process took accepts
// and says nothing, or something else).
func (s *NATSServer) answers() bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.Port), 100*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	buf := make([]byte, 5)
	n, _ := io.ReadFull(c, buf)
	return string(buf[:n]) == "INFO "
}

// log returns the server's log file.
func (s *NATSServer) log() []byte {
	b, _ := os.ReadFile(filepath.Join(s.dir, "nats.log"))
	return b
}

// Stop kills the server by PID; calling it twice is fine.
func (s *NATSServer) Stop() {
	if s.Cmd == nil || s.Cmd.Process == nil {
		return
	}
	_ = s.Cmd.Process.Kill()
	<-s.exited
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
	s.startOnFreePort(t)
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

// DeleteStreams deletes the streams named name+"_DECISIONS", name+"_EVENTS",
// name+"_AUDIT" and name+"_TRUST".
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
	for _, s := range []string{"_DECISIONS", "_EVENTS", "_AUDIT", "_TRUST"} {
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
