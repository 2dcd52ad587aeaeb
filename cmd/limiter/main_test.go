package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/policy"
)

func write(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestValidate(t *testing.T) {
	t.Parallel()
	good := write(t, "good.yaml", string(policy.Example()))
	var out, errb bytes.Buffer
	if code := run([]string{"validate", "--config", good}, &out, &errb); code != 0 {
		t.Fatalf("valid policy: exit %d, stderr %s", code, errb.String())
	}
	if !strings.HasPrefix(out.String(), good+": ok (") {
		t.Fatalf("stdout %q", out.String())
	}

	bad := write(t, "bad.yaml", "version: 1\nlimits:\n  - {name: a, by: [ip], rate: 10/min}\n  - {name: b, by: [ip], rate: fast}\n")
	out.Reset()
	errb.Reset()
	if code := run([]string{"validate", "--config", bad}, &out, &errb); code != 1 {
		t.Fatalf("broken policy: exit %d", code)
	}
	if !strings.HasPrefix(errb.String(), bad+":4: ") {
		t.Fatalf("stderr %q, want it to start with %q", errb.String(), bad+":4: ")
	}

	missing := write(t, "missing.yaml", "version: 1\nlimits:\n  - {name: a, by: [ip], rate: 10/min}\nrisk:\n  reputation:\n    asn_database: /nonexistent/GeoLite2-ASN.mmdb\n")
	errb.Reset()
	if code := run([]string{"validate", "--config", missing}, &out, &errb); code != 1 || !strings.HasPrefix(errb.String(), missing+":6: ") {
		t.Fatalf("missing asn db: exit %d, stderr %q", code, errb.String())
	}
	if code := run([]string{"validate"}, &out, &errb); code != 2 {
		t.Fatalf("no --config: exit %d", code)
	}
}

func TestBudgets(t *testing.T) {
	t.Parallel()
	good := write(t, "good.yaml", string(policy.Example()))
	var out, errb bytes.Buffer
	if code := run([]string{"budgets", "--config", good}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{
		"| route class | limit | key | rate | burst | failure mode |",
		"| auth | login-account | account + route | 5/min | 5 | closed |",
		"| read | user-read | user | 300/min | 300 | open |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("budgets lack %q:\n%s", want, out.String())
		}
	}
}

func TestBadFlags(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if code := run([]string{"--redis", "nonsense"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "neither redis://") {
		t.Fatalf("exit %d %s", code, errb.String())
	}
	if code := run([]string{"serve"}, &out, &errb); code != 2 {
		t.Fatalf("stray argument: exit %d", code)
	}
	errb.Reset()
	if code := run([]string{"--upstream", "http://127.0.0.1:1", "--upstream-transport", "fast"}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), `upstream transport "fast": want lean or std`) {
		t.Fatalf("bad transport: exit %d %s", code, errb.String())
	}
}

// TestAttackSurfaceFlags: the flags of contract 6.1, 6.2 and 6.6 reach
// the config; one address for both listeners is a usage error.
func TestAttackSurfaceFlags(t *testing.T) {
	t.Parallel()
	var errb bytes.Buffer
	cfg, err := parseFlags([]string{"--upstream", "http://127.0.0.1:1", "--api-listen", "127.0.0.1:0", "--api-token", "t",
		"--attest-prefix", "/app/attest/", "--body-timeout", "5s", "--events-max-bytes", "1048576"}, &errb)
	if err != nil {
		t.Fatalf("%v %s", err, errb.String())
	}
	if cfg.APIListen != "127.0.0.1:0" || cfg.APIToken != "t" || cfg.AttestPrefix != "/app/attest/" || cfg.BodyTimeout != 5*time.Second || cfg.EventsMaxBytes != 1<<20 {
		t.Fatalf("config %+v", cfg)
	}
	var out bytes.Buffer
	if code := run([]string{"--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:9", "--api-listen", "127.0.0.1:9"}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "must not be the public listener") {
		t.Fatalf("one address for both: exit %d %s", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"--attest-prefix", "/attest"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "attest prefix") {
		t.Fatalf("bad attest prefix: exit %d %s", code, errb.String())
	}
}

// TestValidateTokenKeyEnv checks that validate refuses a policy whose
// risk.attestation.token_key_env names an unset or short variable, with
// FILE:LINE, and accepts one holding a key (6.3).
func TestValidateTokenKeyEnv(t *testing.T) {
	t.Setenv("TOLLGATE_TEST_TOKEN_KEY_SHORT", "too short")
	t.Setenv("TOLLGATE_TEST_TOKEN_KEY_GOOD", strings.Repeat("k", 32))
	pol := func(env string) string {
		return "version: 1\nlimits:\n  - {name: a, by: [ip], rate: 10/min}\nrisk:\n  attestation:\n    token_key_env: " + env + "\n"
	}
	for _, c := range []struct {
		env, want string
		code      int
	}{
		{"TOLLGATE_TEST_TOKEN_KEY_UNSET", ":6: risk.attestation.token_key_env: attestation: device token key: environment variable TOLLGATE_TEST_TOKEN_KEY_UNSET (token_key_env) is empty or unset", 1},
		{"TOLLGATE_TEST_TOKEN_KEY_SHORT", ":6: risk.attestation.token_key_env: attestation: device token key: environment variable TOLLGATE_TEST_TOKEN_KEY_SHORT (token_key_env) holds 9 bytes, at least 32 needed", 1},
		{"TOLLGATE_TEST_TOKEN_KEY_GOOD", "", 0},
	} {
		f := write(t, "p.yaml", pol(c.env))
		var out, errb bytes.Buffer
		code := run([]string{"validate", "--config", f}, &out, &errb)
		if code != c.code || !strings.HasPrefix(errb.String(), f+c.want) && c.want != "" {
			t.Errorf("%s: exit %d, stderr %q", c.env, code, errb.String())
		}
	}
}
