package testenv

import (
	"os"
	"syscall"
	"testing"
)

// signal sends sig to a server's process, failing t when it cannot.
func signal(t testing.TB, p *os.Process, sig syscall.Signal) {
	t.Helper()
	if p == nil {
		t.Fatalf("testenv: %v: the server is not running", sig)
	}
	if err := p.Signal(sig); err != nil {
		t.Fatalf("testenv: %v to pid %d: %v", sig, p.Pid, err)
	}
}

// Pause stops the nats-server process (SIGSTOP) until Resume (and at the
// latest at cleanup): its clients keep their connections, unanswered.
func (s *NATSServer) Pause(t testing.TB) {
	t.Helper()
	p := s.Cmd.Process
	signal(t, p, syscall.SIGSTOP)
	t.Cleanup(func() { _ = p.Signal(syscall.SIGCONT) })
}

// Resume continues a paused nats-server (SIGCONT).
func (s *NATSServer) Resume(t testing.TB) {
	t.Helper()
	signal(t, s.Cmd.Process, syscall.SIGCONT)
}

// Pause stops the server's process (SIGSTOP): it keeps its connections
// and answers nothing until Resume, as a stalled Redis does. The process
// is resumed at cleanup too, so that Stop can end it.
func (s *RedisServer) Pause(t testing.TB) {
	t.Helper()
	if s.Cmd == nil || s.Cmd.Process == nil {
		t.Fatal("testenv: pause: redis-server is not running")
	}
	p := s.Cmd.Process
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("testenv: SIGSTOP redis-server (pid %d): %v", p.Pid, err)
	}
	t.Cleanup(func() { _ = p.Signal(syscall.SIGCONT) })
}

// Resume continues a paused server (SIGCONT).
func (s *RedisServer) Resume(t testing.TB) {
	t.Helper()
	if s.Cmd == nil || s.Cmd.Process == nil {
		t.Fatal("testenv: resume: redis-server is not running")
	}
	if err := s.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("testenv: SIGCONT redis-server (pid %d): %v", s.Cmd.Process.Pid, err)
	}
}
