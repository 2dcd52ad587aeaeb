package replay

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/streams"
)

func TestParseArgs(t *testing.T) {
	t.Parallel()
	env := map[string]string{"TOLLGATE_NATS": "nats://127.0.0.1:4222", "TOLLGATE_SUBJECT_PREFIX": "x."}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	tests := []struct {
		name    string
		args    []string
		wantErr string // in stderr; "" for success
	}{
		{"ok", []string{"--config", "c.yaml", "--since", "90m"}, ""},
		{"no config", []string{}, "--config CANDIDATE.yaml is required"},
		{"since and from-seq", []string{"--config", "c.yaml", "--since", "1h", "--from-seq", "7"}, "--since and --from-seq exclude each other"},
		{"bad since", []string{"--config", "c.yaml", "--since", "yesterday"}, `invalid value "yesterday" for flag -since`},
		{"negative since", []string{"--config", "c.yaml", "--since", "-1h"}, "--since and --from-seq must be positive"},
		{"extra argument", []string{"--config", "c.yaml", "now"}, `unexpected argument "now"`},
		{"unknown flag", []string{"--config", "c.yaml", "--dry"}, "flag provided but not defined: -dry"},
		{"bad bound", []string{"--config", "c.yaml", "--max-keys", "0"}, "--max-keys and --max-identities must be at least 1"},
		{"missing nats-ca", []string{"--config", "c.yaml", "--nats-ca", "/nonexistent/ca.pem"}, "streams: nats CA: open /nonexistent/ca.pem"},
		{"nats-ca not PEM", []string{"--config", "c.yaml", "--nats-ca", "cmd_test.go"}, "streams: nats CA cmd_test.go: no PEM certificate"},
		{"nats-creds not creds", []string{"--config", "c.yaml", "--nats-creds", "doc.go"}, "not a JWT + nkey credentials file"},
		{"bad nats scheme", []string{"--config", "c.yaml", "--nats", "http://u:secret@h:4222"}, `streams: nats url http://***@h:4222: scheme "http"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, err := ParseArgs(tc.args, lookup)
			if tc.wantErr == "" {
				if err != nil || a.NATSURL != env["TOLLGATE_NATS"] || a.Streams.Prefix != "x." || a.Range.Since != 90*time.Minute {
					t.Fatalf("ParseArgs: %v %+v", err, a)
				}
				return
			}
			var errb bytes.Buffer
			if code := Command(context.Background(), tc.args, lookup, &bytes.Buffer{}, &errb); code != 2 || !strings.Contains(errb.String(), tc.wantErr) {
				t.Fatalf("exit %d, stderr %q, want 2 and %q", code, errb.String(), tc.wantErr)
			}
		})
	}
	// --nats-ca and --nats-creds, from the command line or the environment.
	dir := t.TempDir()
	ca, creds := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "u.creds")
	testenv.WriteCA(t, ca)
	if err := os.WriteFile(creds, []byte("-----BEGIN NATS USER JWT-----\nx\n------END NATS USER JWT------\n-----BEGIN USER NKEY SEED-----\ny\n------END USER NKEY SEED------\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	authEnv := func(k string) (string, bool) {
		if k == "TOLLGATE_NATS_CREDS" {
			return creds, true
		}
		return lookup(k)
	}
	if a, err := ParseArgs([]string{"--config", "c.yaml", "--nats", "nats+tls://u:p@h:4222", "--nats-ca", ca}, authEnv); err != nil ||
		a.NATSAuth != (streams.Auth{CA: ca, Creds: creds}) || a.NATSURL != "nats+tls://u:p@h:4222" {
		t.Fatalf("ParseArgs with --nats-ca, TOLLGATE_NATS_CREDS: %v %+v", err, a)
	}
	var out bytes.Buffer
	if code := Command(context.Background(), []string{"--help"}, lookup, &out, &bytes.Buffer{}); code != 0 ||
		!strings.Contains(out.String(), "--from-seq N") || !strings.Contains(out.String(), "TOLLGATE_NATS") ||
		!strings.Contains(out.String(), "--nats-ca FILE") || !strings.Contains(out.String(), "TOLLGATE_NATS_CREDS") {
		t.Fatalf("--help: exit %d\n%s", code, out.String())
	}
}
