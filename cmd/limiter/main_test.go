package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/attestation/attestationtest"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/service"
)

func write(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// envMap is a test environment: only these variables exist.
func envMap(kv ...string) lookupEnv {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// runT runs the limiter's command line in env and returns its exit code,
// stdout and stderr.
func runT(env lookupEnv, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, env, &out, &errb)
	return code, out.String(), errb.String()
}

func TestValidate(t *testing.T) {
	t.Parallel()
	good := write(t, "good.yaml", string(policy.Example()))
	if code, out, errs := runT(envMap(), "validate", "--config", good); code != 0 || !strings.HasPrefix(out, good+": ok (") {
		t.Fatalf("valid policy: exit %d, stdout %q, stderr %s", code, out, errs)
	}
	// TOLLGATE_CONFIG names the file as --config does.
	if code, out, _ := runT(envMap("TOLLGATE_CONFIG", good), "validate"); code != 0 || !strings.HasPrefix(out, good+": ok (") {
		t.Fatalf("TOLLGATE_CONFIG: exit %d %q", code, out)
	}

	bad := write(t, "bad.yaml", "version: 1\nlimits:\n  - {name: a, by: [ip], rate: 10/min}\n  - {name: b, by: [ip], rate: fast}\n")
	if code, _, errs := runT(envMap(), "validate", "--config", bad); code != 1 || !strings.HasPrefix(errs, bad+":4: ") {
		t.Fatalf("broken policy: exit %d, stderr %q, want it to start with %q", code, errs, bad+":4: ")
	}

	missing := write(t, "missing.yaml", "version: 1\nlimits:\n  - {name: a, by: [ip], rate: 10/min}\nrisk:\n  reputation:\n    asn_database: /nonexistent/GeoLite2-ASN.mmdb\n")
	if code, _, errs := runT(envMap(), "validate", "--config", missing); code != 1 || !strings.HasPrefix(errs, missing+":6: ") {
		t.Fatalf("missing asn db: exit %d, stderr %q", code, errs)
	}
	// The ASN database is opened, as at start: a file that is not one fails.
	junk := write(t, "junk.mmdb", "not a database")
	notDB := write(t, "notdb.yaml", "version: 1\nlimits:\n  - {name: a, by: [ip], rate: 10/min}\nrisk:\n  reputation:\n    asn_database: "+junk+"\n")
	if code, _, errs := runT(envMap(), "validate", "--config", notDB); code != 1 || errs != "reputation: invalid ASN database "+junk+": error opening database: invalid MaxMind DB file\n" {
		t.Fatalf("junk asn db: exit %d, stderr %q", code, errs)
	}
	if code, _, errs := runT(envMap(), "validate"); code != 2 || !strings.Contains(errs, "--config FILE (or TOLLGATE_CONFIG) is required") {
		t.Fatalf("no --config: exit %d %q", code, errs)
	}
	// validate checks the flags and environment as a start does (exit 2).
	if code, _, errs := runT(envMap("TOLLGATE_STORE_TIMEOUT", "abc"), "validate", "--config", good); code != 2 || !strings.Contains(errs, "TOLLGATE_STORE_TIMEOUT") {
		t.Fatalf("bad env in validate: exit %d %q", code, errs)
	}
}

// androidPolicy names the Play Integrity key variables DEC and VER.
const androidPolicy = `version: 1
limits:
  - {name: a, by: [ip], rate: 10/min}
risk:
  attestation:
    android: {package_name: com.example.app, decryption_key_env: DEC, verification_key_env: VER}
`

// TestValidateEnvironment: validate checks the variables the policy names
// (present, non-empty, decodable), as the start does.
func TestValidateEnvironment(t *testing.T) {
	t.Parallel()
	keys := attestationtest.NewPlayKeys(t)
	p := write(t, "android.yaml", androidPolicy)
	for _, c := range []struct {
		name    string
		env     lookupEnv
		code    int
		wantErr string
	}{
		{"unset", envMap(), 1, p + ":6: risk.attestation.android.decryption_key_env: environment variable DEC is empty or unset\n" +
			p + ":6: risk.attestation.android.verification_key_env: environment variable VER is empty or unset\n"},
		{"empty", envMap("DEC", "", "VER", keys.VerB64), 1, p + ":6: risk.attestation.android.decryption_key_env: environment variable DEC is empty or unset\n"},
		{"ver unset", envMap("DEC", keys.DecB64), 1, p + ":6: risk.attestation.android.verification_key_env: environment variable VER is empty or unset\n"},
		{"not base64", envMap("DEC", "%%%", "VER", keys.VerB64), 1, p + ":6: risk.attestation.android.decryption_key_env: environment variable DEC: attestation: play decryption key: not base64"},
		{"set", envMap("DEC", keys.DecB64, "VER", keys.VerB64), 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runT(c.env, "validate", "--config", p)
			if code != c.code || !strings.Contains(errs, c.wantErr) || (c.code == 0) != strings.HasSuffix(out, "ok (0 routes, 1 limits)\n") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d and %q", code, out, errs, c.code, c.wantErr)
			}
		})
	}
}

// TestValidateNamesEveryField: validate reports every file and variable
// the attestation section names that cannot be used, each with its
// FILE:LINE and field, not only the first.
func TestValidateNamesEveryField(t *testing.T) {
	t.Parallel()
	junk := write(t, "junk.pem", "not a certificate")
	p := write(t, "every.yaml", `version: 1
limits:
  - {name: a, by: [ip], rate: 10/min}
risk:
  attestation:
    token_key_env: NOPE_TOKEN
    apple: {app_id: T.com.example.app, root_ca_file: `+junk+`}
    android: {package_name: com.example.app, decryption_key_env: NOPE_DEC, verification_key_env: NOPE_VER}
`)
	code, _, errs := runT(envMap(), "validate", "--config", p)
	lines := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
	want := []string{
		p + ":7: risk.attestation.apple.root_ca_file: attestation: apple root CA " + junk + ": ",
		p + ":8: risk.attestation.android.decryption_key_env: environment variable NOPE_DEC is empty or unset",
		p + ":8: risk.attestation.android.verification_key_env: environment variable NOPE_VER is empty or unset",
		p + ":6: risk.attestation.token_key_env: ",
	}
	if code != 1 || len(lines) != len(want) {
		t.Fatalf("exit %d, stderr %q; want 1 and %d lines", code, errs, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: %q, want it to start %q", i+1, lines[i], w)
		}
	}
}

// TestProxyUserKey: in proxy mode, a policy whose user_signature_key_env
// names an empty variable is refused by validate and at start (exit 1,
// naming the variable); with the variable set, validate passes.
func TestProxyUserKey(t *testing.T) {
	t.Parallel()
	p := write(t, "policy.yaml", string(policy.Example())) // names TOLLGATE_USER_KEY
	want := p + ":15: identity.user_signature_key_env: proxy mode: environment variable TOLLGATE_USER_KEY is empty"
	up := []string{"--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:0", "--config", p}
	if code, _, errs := runT(envMap(), append([]string{"validate"}, up...)...); code != 1 || !strings.Contains(errs, want) {
		t.Fatalf("validate, key unset: exit %d %q", code, errs)
	}
	if code, _, errs := runT(envMap("TOLLGATE_USER_KEY", ""), up...); code != 1 || !strings.Contains(errs, want) {
		t.Fatalf("start, key empty: exit %d %q", code, errs)
	}
	if code, _, errs := runT(envMap("TOLLGATE_USER_KEY", "k3y"), append([]string{"validate"}, up...)...); code != 0 {
		t.Fatalf("validate, key set: exit %d %q", code, errs)
	}
	// Without --upstream the identity section is not used: no refusal.
	if code, _, errs := runT(envMap(), "validate", "--config", p); code != 0 {
		t.Fatalf("validate, not proxy: exit %d %q", code, errs)
	}
}

func TestBudgets(t *testing.T) {
	t.Parallel()
	good := write(t, "good.yaml", string(policy.Example()))
	code, out, errs := runT(envMap(), "budgets", "--config", good)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"| route class | limit | key | rate | burst | failure mode |",
		"| auth | login-account (trusted devices: own) | account + route | 5/min | 5 | closed |",
		"gives each trusted device of the request's account",
		"| read | user-read | user | 300/min | 300 | open |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("budgets lack %q:\n%s", want, out)
		}
	}
	if code, _, _ := runT(envMap(), "budgets"); code != 2 {
		t.Errorf("budgets without --config: exit %d, want 2", code)
	}
	if code, _, _ := runT(envMap(), "budgets", "--config", good, "extra"); code != 2 {
		t.Errorf("budgets with a stray argument: exit %d, want 2", code)
	}
	if code, _, _ := runT(envMap(), "budgets", "--config", "/nonexistent.yaml"); code != 1 {
		t.Errorf("budgets of a missing file: exit %d, want 1", code)
	}
}

// TestHelp: --help (and -h, and help of a subcommand) lists every command
// with an example and every flag with its environment variable, exit 0.
func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"-h"}, {"-help"}, {"validate", "--help"}, {"budgets", "--help"}} {
		code, out, errs := runT(envMap(), args...)
		if code != 0 || errs != "" {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errs)
		}
		for _, c := range commands() {
			if !strings.Contains(out, "  limiter "+c.Name) || !strings.Contains(out, c.Example) {
				t.Errorf("%v: help lacks command %q or its example %q", args, c.Name, c.Example)
			}
		}
		for _, want := range []string{"--version", "Exit codes:"} {
			if !strings.Contains(out, want) {
				t.Errorf("%v: help lacks %q", args, want)
			}
		}
		for _, f := range flags(new(service.Config)) {
			line := ""
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "  --"+f.Name+" ") || l == "  --"+f.Name {
					line = l
				}
			}
			if line == "" || f.Env == "" || !strings.Contains(line, " "+f.Env+" ") {
				t.Errorf("%v: flag --%s: line %q lacks its env var %q", args, f.Name, line, f.Env)
			}
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	code, out, errs := runT(envMap(), "--version")
	if code != 0 || errs != "" || !strings.HasPrefix(out, "limiter ") || !strings.Contains(out, " revision ") {
		t.Fatalf("--version: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// TestUsageErrors: every usage error exits 2 with a message naming what is
// wrong, flags and environment values alike.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		env     lookupEnv
		args    []string
		wantErr string
	}{
		{"unknown flag", envMap(), []string{"--nope"}, "flag provided but not defined: -nope"},
		{"bad duration flag", envMap(), []string{"--store-timeout", "abc"}, "want a duration"},
		{"bad duration env", envMap("TOLLGATE_STORE_TIMEOUT", "abc"), nil, `environment variable TOLLGATE_STORE_TIMEOUT="abc" (for --store-timeout): want a duration`},
		{"bad int env", envMap("TOLLGATE_REDIS_LANES", "four"), nil, "TOLLGATE_REDIS_LANES"},
		{"bad bool env", envMap("TOLLGATE_NO_L1", "maybe"), nil, "TOLLGATE_NO_L1"},
		{"negative env", envMap("TOLLGATE_REDIS_LANES", "-1"), nil, `TOLLGATE_REDIS_LANES="-1" (for --redis-lanes): want more than 0`},
		{"zero replicas", envMap(), []string{"--stream-replicas", "0"}, `invalid value "0" for flag -stream-replicas: want more than 0`},
		{"zero env", envMap("TOLLGATE_STORE_TIMEOUT", "0"), nil, `TOLLGATE_STORE_TIMEOUT="0" (for --store-timeout): want more than 0`},
		{"stray argument", envMap(), []string{"serve"}, `unexpected argument "serve"`},
		{"bad redis", envMap(), []string{"--redis", "nonsense"}, "neither redis://"},
		{"bad redis env", envMap("TOLLGATE_REDIS", "nonsense"), nil, "neither redis://"},
		{"bad listen", envMap(), []string{"--listen", "nonsense"}, `listen address "nonsense"`},
		{"bad upstream", envMap(), []string{"--upstream", "ftp://x"}, `upstream "ftp://x" is not an http(s) URL`},
		{"removed upstream transport", envMap(), []string{"--upstream", "http://127.0.0.1:1", "--upstream-transport", "std"}, "flag provided but not defined: -upstream-transport"},
		{"negative upstream timeout", envMap(), []string{"--upstream", "http://127.0.0.1:1", "--upstream-timeout", "-1s"}, `invalid value "-1s" for flag -upstream-timeout: want more than 0`},
		{"negative grpc streams", envMap("TOLLGATE_GRPC_MAX_STREAMS", "-1"), nil, `TOLLGATE_GRPC_MAX_STREAMS="-1" (for --grpc-max-streams): want more than 0`},
		{"validate bad flag", envMap(), []string{"validate", "--nope"}, "not defined"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, _, errs := runT(c.env, c.args...)
			if code != 2 || !strings.Contains(errs, c.wantErr) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errs, c.wantErr)
			}
		})
	}
	// A flag beats its variable: the bad variable is not read.
	if code, _, errs := runT(envMap("TOLLGATE_STORE_TIMEOUT", "abc", "TOLLGATE_CONFIG", write(t, "p.yaml", string(policy.Example()))), "validate", "--store-timeout", "1s"); code != 0 {
		t.Fatalf("flag over bad env: exit %d %q", code, errs)
	}
}

// TestRuntimeFailureExit1: a failure once the command line is fine (the
// listen port taken) exits 1.
func TestRuntimeFailureExit1(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	code, _, errs := runT(envMap(), "--listen", l.Addr().String(), "--nats-port", "0")
	if code != 1 || !strings.Contains(errs, "listen "+l.Addr().String()) {
		t.Fatalf("port in use: exit %d %q", code, errs)
	}
}

// TestReplayDispatch: `limiter replay` reaches package replay: usage errors
// exit 2, a broken candidate policy is a run-time failure (exit 1, FILE:LINE).
func TestReplayDispatch(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if code := run([]string{"replay", "--config", "x.yaml"}, envMap(), &out, &errb); code != 2 || !strings.Contains(errb.String(), "--nats URL is required") {
		t.Fatalf("no --nats: exit %d, stderr %q", code, errb.String())
	}
	bad := write(t, "bad.yaml", "version: 1\nlimits:\n  - {name: b, by: [ip], rate: fast}\n")
	errb.Reset()
	if code := run([]string{"replay", "--nats", "nats://127.0.0.1:1", "--config", bad}, envMap(), &out, &errb); code != 1 || !strings.HasPrefix(errb.String(), "limiter replay: "+bad+":3: ") {
		t.Fatalf("broken candidate: exit %d, stderr %q", code, errb.String())
	}
}

// TestBadGRPCListen: a --grpc-listen that is not host:port is a usage error.
func TestBadGRPCListen(t *testing.T) {
	t.Parallel()
	if code, _, errs := runT(envMap(), "--grpc-listen", "8081"); code != 2 || !strings.Contains(errs, `grpc listen address "8081"`) {
		t.Fatalf("bad grpc address: exit %d %s", code, errs)
	}
}

// TestAttackSurfaceFlags: the flags of contract 6.1, 6.2 and 6.6 reach
// the config, from the command line or the environment; one address for
// both listeners and a bad attest prefix are usage errors.
func TestAttackSurfaceFlags(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	var cfg service.Config
	env := envMap("TOLLGATE_API_TOKEN", "t", "TOLLGATE_EVENTS_MAX_BYTES", "1048576")
	if code, ok := parse("limiter", &cfg, []string{"--upstream", "http://127.0.0.1:1", "--api-listen", "127.0.0.1:0",
		"--attest-prefix", "/app/attest/", "--body-timeout", "5s"}, env, &out, &errb); !ok {
		t.Fatalf("exit %d %s", code, errb.String())
	}
	if cfg.APIListen != "127.0.0.1:0" || cfg.APIToken != "t" || cfg.AttestPrefix != "/app/attest/" || cfg.BodyTimeout != 5*time.Second || cfg.EventsMaxBytes != 1<<20 {
		t.Fatalf("config %+v", cfg)
	}
	if code := run([]string{"--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:9", "--api-listen", "127.0.0.1:9"}, envMap(), &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "must not be the public listener") {
		t.Fatalf("one address for both: exit %d %s", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"--attest-prefix", "/attest"}, envMap(), &out, &errb); code != 2 || !strings.Contains(errb.String(), "attest prefix") {
		t.Fatalf("bad attest prefix: exit %d %s", code, errb.String())
	}
}

// TestValidateTokenKeyEnv checks that validate refuses a policy whose
// risk.attestation.token_key_env names an unset or short variable, with
// FILE:LINE, and accepts one holding a key (6.3).
func TestValidateTokenKeyEnv(t *testing.T) {
	t.Parallel()
	env := envMap("TOLLGATE_TEST_TOKEN_KEY_SHORT", "too short", "TOLLGATE_TEST_TOKEN_KEY_GOOD", strings.Repeat("k", 32))
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
		code, _, errs := runT(env, "validate", "--config", f)
		if code != c.code || !strings.HasPrefix(errs, f+c.want) && c.want != "" {
			t.Errorf("%s: exit %d, stderr %q", c.env, code, errs)
		}
	}
}

// TestBadListenAddressesAreUsageErrors (6.8: a bad flag value exits 2):
// --api-listen is checked as --listen is, and --grpc-listen's port must
// be a port. Before, neither was checked before the start: the limiter
// started its embedded NATS and risk engine, then failed to listen and
// exited 1, which systemd (Restart=on-failure, RestartPreventExitStatus=2)
// restarted every 2 s for ever.
func TestBadListenAddressesAreUsageErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		env     lookupEnv
		args    []string
		wantErr string
	}{
		{"api listen not host:port", envMap(), []string{"--upstream", "http://127.0.0.1:1", "--api-listen", "nonsense"}, `api listen address "nonsense"`},
		{"api listen env bad port", envMap("TOLLGATE_API_LISTEN", "127.0.0.1:80801"), []string{"--upstream", "http://127.0.0.1:1"}, `api listen address "127.0.0.1:80801"`},
		{"grpc listen bad port", envMap(), []string{"--grpc-listen", "127.0.0.1:grpc-port"}, `grpc listen address "127.0.0.1:grpc-port"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// A policy proxy mode starts with (no user signature key to set).
			conf := write(t, "p.yaml", "version: 1\nlimits: [{name: g, by: [global], rate: 10/s}]\n")
			code, _, errs := runT(c.env, append(c.args, "--config", conf, "--listen", "127.0.0.1:0", "--nats-port", "0")...)
			if code != 2 || !strings.Contains(errs, c.wantErr) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errs, c.wantErr)
			}
		})
	}
}

// TestBadNATSNamesAreUsageErrors (6.8): a --stream-name JetStream cannot
// name a stream with, or a --subject-prefix no subject can start with,
// is a usage error (exit 2). Before, the limiter started, logged once
// that the streams were not ensured, and dropped every decision and
// refused every report for as long as it ran.
func TestBadNATSNamesAreUsageErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		env     lookupEnv
		args    []string
		wantErr string
	}{
		{"dot in stream name", envMap(), []string{"--stream-name", "TOLL.GATE"}, `stream name "TOLL.GATE"`},
		{"space in stream name env", envMap("TOLLGATE_STREAM_NAME", "TOLL GATE"), nil, `stream name "TOLL GATE"`},
		{"wildcard in subject prefix", envMap(), []string{"--subject-prefix", "tollgate.*."}, `subject prefix "tollgate.*."`},
		{"empty token in subject prefix", envMap(), []string{"--subject-prefix", "acme..tollgate."}, `subject prefix "acme..tollgate."`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, _, errs := runT(c.env, append(c.args, "--listen", "127.0.0.1:0", "--nats-port", "0")...)
			if code != 2 || !strings.Contains(errs, c.wantErr) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errs, c.wantErr)
			}
		})
	}
}
