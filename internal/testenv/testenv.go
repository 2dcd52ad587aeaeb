// Package testenv gives tests real servers: the shared Redis (with a key
// prefix of their own, removed at cleanup) and the shared NATS; private
// redis-server and nats-server processes on free loopback ports, stopped
// by PID (a Redis Cluster with replicas, a Sentinel, a JetStream cluster,
// a NATS server a test can pause); Alertmanager and the gateways (Caddy,
// NGINX) the attack and gateway tests drive. Beside them: Eventually
// (poll to a deadline instead of sleeping), a goroutine-leak checker,
// the process's CPU time for benchmarks, and RequireShared (fail instead
// of skipping when a server is missing).
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisAddr is the shared test Redis: $TOLLGATE_TEST_REDIS or 127.0.0.1:6379.
func RedisAddr() string {
	if a := os.Getenv("TOLLGATE_TEST_REDIS"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// Redis returns a client of the shared test Redis and a key prefix unique
// to this test; every key under the prefix is deleted at cleanup. It fails
// the test when Redis does not answer (scripts/test starts it).
func Redis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: RedisAddr(), PoolSize: 64})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("testenv: redis at %s: %v (run ./scripts/test, which starts it)", RedisAddr(), err)
	}
	prefix := Prefix(t)
	t.Cleanup(func() {
		DeletePrefix(c, prefix)
		_ = c.Close()
	})
	return c, prefix
}

// Prefix returns "t:<random>:" for a test's keys.
func Prefix(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "t:" + hex.EncodeToString(b[:]) + ":"
}

// DeletePrefix deletes every key that starts with prefix (hash tags included).
func DeletePrefix(c redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 500 {
			c.Del(ctx, keys...)
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		c.Del(ctx, keys...)
	}
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// RedisServer is a private redis-server process.
type RedisServer struct {
	Addr string
	Port int
	Cmd  *exec.Cmd
	dir  string
	args []string
}

// StartRedis starts redis-server on a free loopback port with extra args,
// waits until it answers and stops it at cleanup.
func StartRedis(t testing.TB, extra ...string) *RedisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("testenv: redis-server not installed (scripts/ensure-services installs it): %v", err)
	}
	s := &RedisServer{dir: t.TempDir()}
	s.args = extra
	for attempt := 0; ; attempt++ {
		s.Port = FreePort(t)
		s.Addr = fmt.Sprintf("127.0.0.1:%d", s.Port)
		if err := s.start(bin); err == nil {
			break
		} else if attempt == 4 {
			t.Fatalf("testenv: start redis-server: %v", err)
		}
	}
	t.Cleanup(func() { s.Stop() })
	return s
}

func (s *RedisServer) start(bin string) error {
	args := append([]string{"--port", fmt.Sprint(s.Port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log")}, s.args...)
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	s.Cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", s.Addr, 100*time.Millisecond)
		if err == nil {
			_, _ = c.Write([]byte("PING\r\n"))
			buf := make([]byte, 16)
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			n, _ := c.Read(buf)
			c.Close()
			// -NOAUTH: up, with --requirepass.
			if strings.HasPrefix(string(buf[:n]), "+PONG") || strings.HasPrefix(string(buf[:n]), "-NOAUTH") {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_, _ = cmd.Process.Wait()
	log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	return fmt.Errorf("redis-server on %s did not answer: %s", s.Addr, log)
}

// Stop kills the server by PID and waits for it; calling it twice is fine.
func (s *RedisServer) Stop() {
	if s.Cmd == nil || s.Cmd.Process == nil {
		return
	}
	_ = s.Cmd.Process.Kill()
	_, _ = s.Cmd.Process.Wait()
	s.Cmd = nil
}

// Restart starts the server again on the same port, empty.
func (s *RedisServer) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	bin, _ := exec.LookPath("redis-server")
	if err := s.start(bin); err != nil {
		t.Fatalf("testenv: restart redis-server: %v", err)
	}
}

// Cluster is a private Redis Cluster of three masters on loopback.
type Cluster struct {
	Nodes []*RedisServer
	Addrs []string
}

// StartCluster starts three redis-server processes with cluster mode on,
// joins them with `redis-cli --cluster create` and waits until the
// cluster is ok; they are stopped at cleanup.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	return StartClusterAuth(t, "")
}

// StartClusterAuth is StartCluster with every node requiring password
// (requirepass and masterauth); "" for none.
func StartClusterAuth(t testing.TB, password string) *Cluster {
	t.Helper()
	c := &Cluster{}
	var auth []string
	if password != "" {
		auth = []string{"--requirepass", password, "--masterauth", password}
	}
	for i := 0; i < 3; i++ {
		dir := t.TempDir()
		n := StartRedis(t, append([]string{"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "2000"}, auth...)...)
		c.Nodes = append(c.Nodes, n)
		c.Addrs = append(c.Addrs, n.Addr)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("testenv: redis-cli not installed: %v", err)
	}
	var cliAuth []string
	if password != "" {
		cliAuth = []string{"--no-auth-warning", "-a", password}
	}
	args := append(append([]string{}, cliAuth...), "--cluster", "create")
	args = append(args, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("testenv: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := true
		for _, a := range c.Addrs {
			out, _ := exec.Command(cli, append(append([]string{}, cliAuth...), "-h", "127.0.0.1", "-p", strings.Split(a, ":")[1], "cluster", "info")...).Output()
			ok = ok && strings.Contains(string(out), "cluster_state:ok")
		}
		if ok {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: cluster on %v not ok within 20s", c.Addrs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TLSFiles are the PEM files of a TLS-enabled test server.
type TLSFiles struct{ CA, Cert, Key string }

// StartClusterTLS starts a 3-master Redis Cluster whose client port and
// cluster bus speak TLS only towards clients that use it (tls-port, with
// tls-cluster and tls-replication on), every node requiring password.
// Addrs are the nodes' TLS addresses.
func StartClusterTLS(t testing.TB, password string, files TLSFiles) *Cluster {
	t.Helper()
	c := &Cluster{}
	tlsArgs := []string{"--tls-cert-file", files.Cert, "--tls-key-file", files.Key, "--tls-ca-cert-file", files.CA,
		"--tls-auth-clients", "no", "--tls-cluster", "yes", "--tls-replication", "yes"}
	for i := 0; i < 3; i++ {
		dir := t.TempDir()
		port := FreePort(t)
		args := append([]string{"--tls-port", fmt.Sprint(port), "--cluster-port", fmt.Sprint(FreePort(t)), "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "2000", "--requirepass", password, "--masterauth", password}, tlsArgs...)
		n := StartRedis(t, args...)
		c.Nodes = append(c.Nodes, n)
		c.Addrs = append(c.Addrs, fmt.Sprintf("127.0.0.1:%d", port))
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("testenv: redis-cli not installed: %v", err)
	}
	base := []string{"--tls", "--cacert", files.CA, "--no-auth-warning", "-a", password}
	args := append(append([]string{}, base...), "--cluster", "create")
	args = append(args, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("testenv: redis-cli --cluster create (TLS): %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := true
		for _, a := range c.Addrs {
			out, _ := exec.Command(cli, append(append([]string{}, base...), "-h", "127.0.0.1", "-p", strings.Split(a, ":")[1], "cluster", "info")...).Output()
			ok = ok && strings.Contains(string(out), "cluster_state:ok")
		}
		if ok {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: TLS cluster on %v not ok within 20s", c.Addrs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
