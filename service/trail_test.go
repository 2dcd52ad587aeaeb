package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// trailEntry is the part of an audit event or alert the tests read.
type trailEntry struct {
	Action string   `json:"action"`
	Kind   string   `json:"kind"`
	ID     string   `json:"id"`
	Value  *float64 `json:"value"`
	Reason string   `json:"reason"`
}

// readTrail GETs an admin trail (audit or alerts) and decodes it.
func readTrail(t *testing.T, base, path string) []trailEntry {
	t.Helper()
	code, body := adminDo(t, "GET", base+path, "tok", "")
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	var out []trailEntry
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, body)
	}
	return out
}

// TestAuditAndAlertsSurviveARestart runs the one-process default with
// Redis: an admin change and a lockout alert are listed newest first by
// GET /v1/admin/audit and /v1/admin/alerts, and still after a restart,
// since the embedded NATS keeps a stable store directory with --redis.
func TestAuditAndAlertsSurviveARestart(t *testing.T) {
	t.Parallel()
	_, keyPrefix := testenv.Redis(t)
	cfg := Config{RedisURL: "redis://" + testenv.RedisAddr() + "/0", KeyPrefix: keyPrefix, AdminToken: "tok",
		NATSStoreDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler), Getenv: testGetenv}
	ctx, cancel := context.WithCancel(context.Background())
	r, err := Start(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	base := "http://" + r.Addr
	for i, reason := range []string{"first", "second"} {
		body := fmt.Sprintf(`{"multiplier":0.%d,"ttl":"1h","reason":%q}`, i+1, reason)
		if code, b := adminDo(t, "PUT", base+"/v1/admin/multipliers/ip/192.0.2.9", "tok", body); code != 200 {
			t.Fatalf("PUT: %d %s", code, b)
		}
	}
	reportFailedLogins(t, base, "trail-victim", 10)
	eventually(t, 10*time.Second, func() string {
		if a := readTrail(t, base, "/v1/admin/alerts"); len(a) == 0 || a[0].Kind != "lockout" || a[0].ID != "trail-victim" {
			return fmt.Sprintf("alerts = %+v, want the lockout of trail-victim", a)
		}
		return ""
	})
	check := func(when string) {
		a := readTrail(t, base, "/v1/admin/audit")
		if len(a) != 2 || a[0].Reason != "second" || a[1].Reason != "first" || a[0].Action != "multiplier_set" || *a[0].Value != 0.2 {
			t.Fatalf("%s: audit = %+v, want the two changes, newest first", when, a)
		}
		if one := readTrail(t, base, "/v1/admin/audit?limit=1"); len(one) != 1 || one[0].Reason != "second" {
			t.Fatalf("%s: audit?limit=1 = %+v", when, one)
		}
		if al := readTrail(t, base, "/v1/admin/alerts?limit=5"); len(al) != 1 || al[0].ID != "trail-victim" {
			t.Fatalf("%s: alerts = %+v, want the lockout alone", when, al)
		}
	}
	check("before the restart")
	cancel()
	<-r.Done
	ctx2, cancel2 := context.WithCancel(context.Background())
	t.Cleanup(cancel2)
	r2, err := Start(ctx2, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel2(); <-r2.Done })
	base = "http://" + r2.Addr
	check("after the restart")
	if code, body := adminDo(t, "GET", base+"/v1/admin/audit?limit=0", "tok", ""); code != 400 || !strings.Contains(body, `parameter \"limit\"`) {
		t.Fatalf("limit=0: %d %s", code, body)
	}
	if code, _ := adminDo(t, "GET", base+"/v1/admin/alerts", "wrong", ""); code != 401 {
		t.Fatalf("wrong token: %d", code)
	}
}

// TestNATSStoreDir derives the embedded server's directory: stable for
// one Redis URL, key prefix and stream name, another for another, none
// (a temp dir) without Redis, the flag's when given.
func TestNATSStoreDir(t *testing.T) {
	t.Parallel()
	a := natsStoreDir(Config{RedisURL: "redis://:secret@10.0.0.5:6379/0", KeyPrefix: "tg:", StreamName: "TOLLGATE"})
	if a == "" || a != natsStoreDir(Config{RedisURL: "redis://:other@10.0.0.5:6379/0", KeyPrefix: "tg:", StreamName: "TOLLGATE"}) {
		t.Fatalf("dir %q: want one stable dir for a Redis whatever its password", a)
	}
	if strings.Contains(a, "secret") {
		t.Fatalf("dir %q names the password", a)
	}
	if b := natsStoreDir(Config{RedisURL: "redis://:secret@10.0.0.5:6379/0", KeyPrefix: "tg2:", StreamName: "TOLLGATE"}); b == a {
		t.Fatalf("another key prefix shares dir %q", a)
	}
	if d := natsStoreDir(Config{}); d != "" {
		t.Fatalf("memory store: dir %q, want a temp dir", d)
	}
	if d := natsStoreDir(Config{NATSStoreDir: "/srv/nats", RedisURL: "redis://x:1/0"}); d != "/srv/nats" {
		t.Fatalf("given dir: %q", d)
	}
}

// TestNATSStoreDirHeldElsewhere starts two embedded servers on one stable
// dir: the second takes a temp dir instead of sharing the first's store.
func TestNATSStoreDirHeldElsewhere(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	first, err := newEmbeddedNATS(natsServerConfig{Dir: dir, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	second, err := newEmbeddedNATS(natsServerConfig{Dir: dir, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if first.dir != dir || first.temp || second.dir == dir || !second.temp {
		t.Fatalf("first %q (temp %v), second %q (temp %v): want the second in a temp dir", first.dir, first.temp, second.dir, second.temp)
	}
	for _, e := range []*embeddedNATS{second, first} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := e.Run(ctx); err != nil {
			t.Fatal(err)
		}
	}
	unlock, err := openStoreDir(dir)
	if err != nil {
		t.Fatalf("dir not released: %v", err)
	}
	defer unlock()
	if _, err := openStoreDir(dir); !errors.Is(err, errStoreDirBusy) {
		t.Fatalf("second lock in one process: %v, want busy", err)
	}
}
