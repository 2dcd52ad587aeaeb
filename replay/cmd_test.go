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
		{"negative since", []string{"--config", "c.yaml", "--since", "-1h"}, "--since and --from-seq must be positive"},
		{"extra argument", []string{"--config", "c.yaml", "now"}, `unexpected argument "now"`},
		{"unknown flag", []string{"--config", "c.yaml", "--dry"}, "flag provided but not defined: -dry"},
		{"bad bound", []string{"--config", "c.yaml", "--max-keys", "0"}, "--max-keys and --max-identities must be at least 1"},
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
	var out bytes.Buffer
	if code := Command(context.Background(), []string{"--help"}, lookup, &out, &bytes.Buffer{}); code != 0 ||
		!strings.Contains(out.String(), "--from-seq N") || !strings.Contains(out.String(), "TOLLGATE_NATS") {
		t.Fatalf("--help: exit %d\n%s", code, out.String())
	}
}
