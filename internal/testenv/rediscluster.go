package testenv

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReplicatedCluster is a private Redis Cluster of three masters, each with
// one replica, on loopback (node timeout 2 s): the shape for failover tests.
type ReplicatedCluster struct {
	Nodes []*RedisServer
	Addrs []string // every node's address, masters and replicas alike
}

// StartReplicatedCluster starts six redis-server processes in cluster mode,
// joins them with `redis-cli --cluster create --cluster-replicas 1` and
// waits until the cluster is ok and every replica's link to its master is
// up; they are stopped at cleanup.
func StartReplicatedCluster(t testing.TB) *ReplicatedCluster {
	t.Helper()
	c := &ReplicatedCluster{}
	for i := 0; i < 6; i++ {
		dir := t.TempDir()
		n := StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "2000")
		c.Nodes = append(c.Nodes, n)
		c.Addrs = append(c.Addrs, n.Addr)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("testenv: redis-cli not installed: %v", err)
	}
	args := append(append([]string{"--cluster", "create"}, c.Addrs...), "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("testenv: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !c.healthy() {
		if time.Now().After(deadline) {
			t.Fatalf("testenv: replicated cluster on %v not ok within 30s", c.Addrs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c
}

// healthy reports every node seeing cluster_state:ok and every replica's
// master link up.
func (c *ReplicatedCluster) healthy() bool {
	for _, n := range c.Nodes {
		if n.Cmd == nil {
			continue
		}
		info := nodeInfo(n.Addr, "cluster", "info")
		if !strings.Contains(info, "cluster_state:ok") {
			return false
		}
		repl := nodeInfo(n.Addr, "info", "replication")
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return false
		}
	}
	return true
}

func nodeInfo(addr string, args ...string) string {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	anys := make([]any, len(args))
	for i, a := range args {
		anys[i] = a
	}
	s, _ := c.Do(ctx, anys...).Text()
	return s
}

// MasterOf returns the running node that serves key's slot as master.
func (c *ReplicatedCluster) MasterOf(key string) (*RedisServer, error) {
	for _, n := range c.Nodes {
		if n.Cmd == nil {
			continue
		}
		repl := nodeInfo(n.Addr, "info", "replication")
		if !strings.Contains(repl, "role:master") {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		slot, err := cl.ClusterKeySlot(ctx, key).Result()
		var slots []redis.ClusterSlot
		if err == nil {
			slots, err = cl.ClusterSlots(ctx).Result()
		}
		cancel()
		cl.Close()
		if err != nil {
			return nil, fmt.Errorf("testenv: cluster slots: %w", err)
		}
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
				for _, m := range c.Nodes {
					if m.Addr == s.Nodes[0].Addr && m.Cmd != nil {
						return m, nil
					}
				}
			}
		}
		return nil, fmt.Errorf("testenv: no running master serves the slot of %q", key)
	}
	return nil, fmt.Errorf("testenv: no running master")
}

// Promoted reports whether the cluster is ok again after a master was
// killed: some replica took over its slots.
func (c *ReplicatedCluster) Promoted() bool {
	for _, n := range c.Nodes {
		if n.Cmd == nil {
			continue
		}
		if !strings.Contains(nodeInfo(n.Addr, "cluster", "info"), "cluster_state:ok") {
			return false
		}
	}
	return true
}

// ReplicaHas reports whether a running replica holds key (READONLY read).
func (c *ReplicatedCluster) ReplicaHas(key string) bool {
	for _, n := range c.Nodes {
		if n.Cmd == nil || !strings.Contains(nodeInfo(n.Addr, "info", "replication"), "role:slave") {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr, DialTimeout: time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		pipe := cl.Pipeline()
		pipe.ReadOnly(ctx)
		ex := pipe.Exists(ctx, key)
		_, _ = pipe.Exec(ctx)
		cancel()
		cl.Close()
		if ex.Val() == 1 {
			return true
		}
	}
	return false
}
