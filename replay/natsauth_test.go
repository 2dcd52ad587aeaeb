package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/replay"
	"github.com/tollgate-dev/tollgate/streams"
)

// TestReplayNATSAuth (7.5): `limiter replay` reads the record from a real
// nats-server that speaks only TLS and requires a password, given
// --nats-ca and the user in the URL; without --nats-ca it fails at run
// time (exit 1) naming the certificate problem and not the password.
func TestReplayNATSAuth(t *testing.T) {
	t.Parallel()
	ns := testenv.StartNATSTLS(t, "replay", "pw-replay")
	url := ns.TLSURL("replay", "pw-replay")
	auth := streams.Auth{CA: ns.CA}
	nc, err := streams.Connect(url, "tollgate-test", auth.Options()...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := streams.Config{Prefix: "auth.", Name: "AUTHTEST", Memory: true}
	if err := streams.EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	ts := time.Now().UTC().Format(time.RFC3339Nano)
	batch := fmt.Sprintf(`{"v":1,"decisions":[{"ts":%q,"request_id":"r1","endpoint":"POST /items","class":"write","route":"* *","limit":"user-write","allowed":true,"result":"allowed","remaining":1,"ip":"192.0.2.9","asn":"","user_id":"u1","device_id":"","account":""}]}`, ts)
	if _, err := js.Publish(ctx, "auth.decisions.write", []byte(batch)); err != nil {
		t.Fatal(err)
	}
	candidate := writeFile(t, "candidate.yaml", loosePolicy)
	args := []string{"--nats", url, "--config", candidate, "--stream-name", "AUTHTEST", "--subject-prefix", "auth.", "--json", "--quiet"}
	noEnv := func(string) (string, bool) { return "", false }
	var out, errb bytes.Buffer
	if code := replay.Command(context.Background(), append(args, "--nats-ca", ns.CA), noEnv, &out, &errb); code != 0 {
		t.Fatalf("replay with --nats-ca: exit %d: %s", code, errb.String())
	}
	var rep struct {
		Record struct{ Decisions int64 } `json:"record"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.Record.Decisions != 1 {
		t.Fatalf("report %v %s", err, out.String())
	}
	out.Reset()
	errb.Reset()
	if code := replay.Command(context.Background(), args, noEnv, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "certificate signed by unknown authority") || strings.Contains(errb.String(), "pw-replay") {
		t.Fatalf("replay without --nats-ca: exit %d: %s", code, errb.String())
	}
}
