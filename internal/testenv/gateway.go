package testenv

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Gateway is a gateway process (Caddy, NGINX) a test started.
type Gateway struct {
	// Addr is its loopback listen address, host:port.
	Addr string
	cmd  *exec.Cmd
	out  *SyncBuffer
}

// Output returns what the gateway printed so far (for failure messages).
func (g *Gateway) Output() string { return g.out.String() }

// findBin finds a gateway binary on PATH or in the sbin directories, or
// fails the test saying how to install it: gateway tests never skip.
func findBin(t testing.TB, name, pkg string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, d := range []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin", "/sbin"} {
		if p := filepath.Join(d, name); isExec(p) {
			return p
		}
	}
	t.Fatalf("testenv: %s is not installed; run ./scripts/ensure-services (it installs the Debian package %s) or apt-get install %s", name, pkg, pkg)
	return ""
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// StartCaddy runs `caddy run` with the Caddyfile conf(port), port a free
// loopback port, and waits until it accepts; it is killed at cleanup.
func StartCaddy(t testing.TB, conf func(port int) string) *Gateway {
	t.Helper()
	bin := findBin(t, "caddy", "caddy")
	dir := t.TempDir()
	return startGateway(t, "caddy", func(port int) *exec.Cmd {
		file := filepath.Join(dir, "Caddyfile")
		writeFile(t, file, conf(port))
		cmd := exec.Command(bin, "run", "--config", file, "--adapter", "caddyfile")
		cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
		return cmd
	})
}

// StartNGINX runs nginx in the foreground with the configuration
// conf(port, dir) (dir a private directory for its pid file, logs and
// temp files), and waits until it accepts; it is killed at cleanup.
func StartNGINX(t testing.TB, conf func(port int, dir string) string) *Gateway {
	t.Helper()
	bin := findBin(t, "nginx", "nginx")
	dir := t.TempDir()
	_ = os.Chmod(dir, 0o755) // workers may run as nobody
	return startGateway(t, "nginx", func(port int) *exec.Cmd {
		file := filepath.Join(dir, "nginx.conf")
		writeFile(t, file, conf(port, dir))
		return exec.Command(bin, "-p", dir, "-c", file, "-e", filepath.Join(dir, "error.log"))
	})
}

func writeFile(t testing.TB, name, text string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startGateway starts cmd(port) on free ports until one works.
func startGateway(t testing.TB, name string, cmd func(port int) *exec.Cmd) *Gateway {
	t.Helper()
	var last string
	for attempt := 0; attempt < 4; attempt++ {
		port := FreePort(t)
		g := &Gateway{Addr: fmt.Sprintf("127.0.0.1:%d", port), cmd: cmd(port), out: &SyncBuffer{}}
		g.cmd.Stdout, g.cmd.Stderr = g.out, g.out
		// A process group of its own: stopping it stops NGINX's workers too.
		g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := g.cmd.Start(); err != nil {
			t.Fatalf("testenv: start %s: %v", name, err)
		}
		exited := make(chan struct{})
		go func() { _ = g.cmd.Wait(); close(exited) }()
		pgid := g.cmd.Process.Pid
		stop := func() {
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
			}
			_ = syscall.Kill(-pgid, syscall.SIGKILL) // stragglers of the group
			<-exited
		}
		if waitListening(g.Addr, exited, 15*time.Second) {
			t.Cleanup(stop)
			return g
		}
		stop()
		last = g.out.String()
	}
	t.Fatalf("testenv: %s did not start listening:\n%s", name, last)
	return nil
}

// waitListening polls addr until it accepts, the process exits or d passes.
func waitListening(addr string, exited chan struct{}, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			c.Close()
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers (a process's
// two output streams, a daemon's logger); the zero value is ready to use.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
