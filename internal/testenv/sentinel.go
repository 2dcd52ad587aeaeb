package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel is a private redis-server --sentinel process.
type Sentinel struct {
	Addr string
	Cmd  *exec.Cmd
}

// StartSentinel starts a Sentinel on a free loopback port that monitors
// the master at masterAddr as name (quorum 1, a master down after 1 s,
// failover timeout 2 s, so a second failover of the same master may start 4 s after the first), authenticating to it with password ("" none). It
// waits until the Sentinel answers and knows replicas replicas, and stops
// it at cleanup.
func StartSentinel(t testing.TB, name, masterAddr, password string, replicas int) *Sentinel {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("testenv: redis-server not installed: %v", err)
	}
	host, port, _ := net.SplitHostPort(masterAddr)
	dir := t.TempDir()
	s := &Sentinel{}
	p := FreePort(t)
	s.Addr = fmt.Sprintf("127.0.0.1:%d", p)
	conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\nsentinel monitor %s %s %s 1\n"+
		"sentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 2000\n",
		p, dir, filepath.Join(dir, "sentinel.log"), name, host, port, name, name)
	if password != "" {
		conf += fmt.Sprintf("sentinel auth-pass %s %s\n", name, password)
	}
	file := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Cmd = exec.Command(bin, file, "--sentinel")
	if err := s.Cmd.Start(); err != nil {
		t.Fatalf("testenv: start sentinel: %v", err)
	}
	t.Cleanup(s.Stop)
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		rs, err := c.Replicas(ctx, name).Result()
		cancel()
		if err == nil && len(rs) >= replicas {
			return s
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "sentinel.log"))
			t.Fatalf("testenv: sentinel on %s does not know %d replicas of %s within 20s (%v, %d known):\n%s", s.Addr, replicas, name, err, len(rs), log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the Sentinel by PID; calling it twice is fine.
func (s *Sentinel) Stop() {
	if s.Cmd == nil || s.Cmd.Process == nil {
		return
	}
	_ = s.Cmd.Process.Kill()
	_, _ = s.Cmd.Process.Wait()
	s.Cmd = nil
}
