package testenv

import (
	"errors"
	"net"
	"testing"
	"time"
)

// TestNATSPortTaken: a server whose port is taken exits, and start says so
// at once, with the server's log, rather than after its 10 s wait (so
// StartNATS can try another port).
func TestNATSPortTaken(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := &NATSServer{dir: t.TempDir(), Port: ln.Addr().(*net.TCPAddr).Port}
	t0 := time.Now()
	err = s.start()
	if !errors.Is(err, errExited) {
		s.Stop()
		t.Fatalf("start on a taken port = %v, want errExited", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("start took %v to see the exit", d)
	}
	t.Log(err)
}

// TestStartNATS: the started server answers, and Stop stops it (twice is
// fine).
func TestStartNATS(t *testing.T) {
	t.Parallel()
	s := StartNATS(t)
	c, err := net.Dial("tcp", s.URL[len("nats://"):])
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	s.Stop()
	s.Stop()
	if c, err := net.DialTimeout("tcp", s.URL[len("nats://"):], time.Second); err == nil {
		c.Close()
		t.Fatal("the server still answers after Stop")
	}
}
