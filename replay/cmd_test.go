package replay

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
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
		{"negative since", []string{"--config", "c.yaml", "--since", "-1h"}, "--since must be positive"},
		{"extra argument", []string{"--config", "c.yaml", "now"}, `unexpected argument "now"`},
		{"unknown flag", []string{"--config", "c.yaml", "--dry"}, "flag provided but not defined: -dry"},
		{"bad bound", []string{"--config", "c.yaml", "--max-keys", "0"}, "--max-keys and --max-identities must be at least 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var errb bytes.Buffer
			a, err := ParseArgs(tc.args, lookup, &errb)
			if tc.wantErr == "" {
				if err != nil || a.NATSURL != env["TOLLGATE_NATS"] || a.Streams.Prefix != "x." || a.Range.Since != 90*time.Minute {
					t.Fatalf("ParseArgs: %v %+v %s", err, a, errb.String())
				}
				return
			}
			if err == nil || !strings.Contains(errb.String(), tc.wantErr) {
				t.Fatalf("err %v, stderr %q, want %q", err, errb.String(), tc.wantErr)
			}
			if code := Command(context.Background(), tc.args, lookup, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
				t.Fatalf("exit %d, want 2", code)
			}
		})
	}
	if code := Command(context.Background(), []string{"--help"}, lookup, &bytes.Buffer{}, &bytes.Buffer{}); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
}
