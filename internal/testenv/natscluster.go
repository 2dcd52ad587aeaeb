package testenv

import (
	"context"
	"fmt"
	"os"
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

// NATSNode is one server of a NATSCluster: a NATSServer started from its
// own configuration file (server_name, JetStream store, routes).
type NATSNode struct {
	Name string // server_name, as JetStream reports it (stream leader, peers)
	*NATSServer
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
		name, confPath := fmt.Sprintf("n%d", i+1), filepath.Join(dir, "nats.conf")
		conf := fmt.Sprintf("server_name: %s\njetstream {store_dir: %q}\n"+
			"cluster {name: tollgate-test, listen: 127.0.0.1:%d, routes: [%s]}\n",
			name, filepath.Join(dir, "js"), routes[i], strings.Join(urls, ", "))
		if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		c.Nodes = append(c.Nodes, &NATSNode{Name: name, NATSServer: StartNATSConfig(t, confPath)})
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
