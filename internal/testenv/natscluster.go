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

// NATSCluster is a private JetStream cluster of nats-server processes on
// loopback, joined by routes: the shape docs/scaling.md asks for.
type NATSCluster struct {
	Nodes []*NATSNode
}

// NATSNode is one server of a NATSCluster.
type NATSNode struct {
	Name string // server_name, as JetStream reports it (stream leader, peers)
	URL  string
	Port int
	cmd  *exec.Cmd
	conf string
	dir  string
}

// StartNATSCluster starts n nats-server processes (JetStream on, a route to
// each other) and waits until JetStream has a meta leader; they are killed
// at cleanup.
func StartNATSCluster(t testing.TB, n int) *NATSCluster {
	t.Helper()
	c := &NATSCluster{}
	routes := make([]int, n)
	for i := range routes {
		routes[i] = FreePort(t)
	}
	var urls []string
	for i := range routes {
		urls = append(urls, fmt.Sprintf("nats-route://127.0.0.1:%d", routes[i]))
	}
	for i := 0; i < n; i++ {
		dir := t.TempDir()
		node := &NATSNode{Name: fmt.Sprintf("n%d", i+1), Port: FreePort(t), dir: dir, conf: filepath.Join(dir, "nats.conf")}
		node.URL = fmt.Sprintf("nats://127.0.0.1:%d", node.Port)
		conf := fmt.Sprintf("server_name: %s\nlisten: 127.0.0.1:%d\njetstream {store_dir: %q}\n"+
			"cluster {name: tollgate-test, listen: 127.0.0.1:%d, routes: [%s]}\n",
			node.Name, node.Port, filepath.Join(dir, "js"), routes[i], strings.Join(urls, ", "))
		if err := os.WriteFile(node.conf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := node.start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(node.Kill)
		c.Nodes = append(c.Nodes, node)
	}
	if err := c.waitMetaLeader(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	return c
}

// URLs is every node's client URL, comma-separated (the --nats form).
func (c *NATSCluster) URLs() string {
	var u []string
	for _, n := range c.Nodes {
		u = append(u, n.URL)
	}
	return strings.Join(u, ",")
}

// Node returns the node named name (a stream's Cluster.Leader), or nil.
func (c *NATSCluster) Node(name string) *NATSNode {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// waitMetaLeader polls until JetStream answers account info through every
// node, which it does only once the cluster elected a meta leader.
func (c *NATSCluster) waitMetaLeader(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		ok := true
		for _, n := range c.Nodes {
			ok = ok && n.jetStreamReady()
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testenv: NATS cluster %s has no JetStream meta leader within %v", c.URLs(), d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (n *NATSNode) jetStreamReady() bool {
	nc, err := nats.Connect(n.URL, nats.Timeout(time.Second))
	if err != nil {
		return false
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err == nil
}

func (n *NATSNode) start() error {
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		bin = "/usr/sbin/nats-server"
	}
	cmd := exec.Command(bin, "-c", n.conf, "-l", filepath.Join(n.dir, "nats.log"))
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testenv: start nats-server %s: %w", n.Name, err)
	}
	n.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", n.Port), 100*time.Millisecond); err == nil {
			conn.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	n.Kill()
	return fmt.Errorf("testenv: nats-server %s on port %d did not answer", n.Name, n.Port)
}

// Kill ends the node by PID (SIGKILL: a crash, not a shutdown); twice is fine.
func (n *NATSNode) Kill() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	_, _ = n.cmd.Process.Wait()
	n.cmd = nil
}

// Restart starts a killed node again on its port, store and routes.
func (n *NATSNode) Restart(t testing.TB) {
	t.Helper()
	n.Kill()
	if err := n.start(); err != nil {
		t.Fatal(err)
	}
}
