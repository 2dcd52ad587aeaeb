package streams_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/streams"
)

func jetStreamOf(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestStreamReplicas creates the streams with one replica on a three-node
// cluster, then again with three (an upgrade to --stream-replicas 3): every
// stream ends with three copies, one leader and two current followers.
func TestStreamReplicas(t *testing.T) {
	t.Parallel()
	c := testenv.StartNATSCluster(t, 3)
	js := jetStreamOf(t, c.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := streams.Config{Name: "REPL", Prefix: "repl."}
	if err := streams.EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Replicas = 3
	// the cluster may still be meshing: until every node has joined the
	// JetStream meta group, three replicas have "no suitable peers"
	for {
		err := streams.EnsureStreams(ctx, js, cfg)
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "no suitable peers") || ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, suffix := range []string{streams.DecisionsStream, streams.EventsStream, streams.AuditStream} {
		name := cfg.Stream(suffix)
		pollUntil(t, 20*time.Second, func() bool {
			info, err := js.Stream(ctx, name)
			if err != nil {
				return false
			}
			si := info.CachedInfo()
			if si.Config.Replicas != 3 || si.Cluster == nil || si.Cluster.Leader == "" || len(si.Cluster.Replicas) != 2 {
				return false
			}
			for _, r := range si.Cluster.Replicas {
				if !r.Current {
					return false
				}
			}
			return true
		}, "stream %s with 3 current replicas", name)
	}
}

// TestStreamReplicasNeedACluster: more than one replica on a server that is
// not clustered is refused with an error that says so and what to do.
func TestStreamReplicasNeedACluster(t *testing.T) {
	t.Parallel()
	js := jetStreamOf(t, embedded(t).URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := streams.EnsureStreams(ctx, js, streams.Config{Replicas: 3})
	if err == nil || !strings.Contains(err.Error(), "not part of a JetStream cluster") || !strings.Contains(err.Error(), "--stream-replicas 1") {
		t.Fatalf("err = %v, want a refusal naming the cluster and --stream-replicas 1", err)
	}
}

// pollUntil polls ok every 50 ms until it holds, failing t after d.
func pollUntil(t *testing.T, d time.Duration, ok func() bool, what string, args ...any) {
	t.Helper()
	testenv.Eventually(t, d, func() string {
		if ok() {
			return ""
		}
		return fmt.Sprintf(what, args...)
	})
}
