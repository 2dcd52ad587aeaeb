// Command limiter is Tollgate's decision service: the check API, admin API
// and metrics. Run alone it is the whole system in one process.
//
//	limiter [flags]                    run the service
//	limiter validate --config FILE     check a policy file (exit 0, or FILE:LINE errors and 1)
//	limiter budgets --config FILE      print every budget as a Markdown table
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/service"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the exit, for tests.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "validate":
			return validate(args[1:], stdout, stderr)
		case "budgets":
			return budgets(args[1:], stdout, stderr)
		}
	}
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := service.Start(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "limiter:", err)
		return 1
	}
	<-r.Done
	if r.Err != nil {
		fmt.Fprintln(stderr, "limiter:", r.Err)
		return 1
	}
	return 0
}

// env returns the environment variable or def.
func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func parseFlags(args []string, stderr io.Writer) (service.Config, error) {
	var cfg service.Config
	fs := flag.NewFlagSet("limiter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.ConfigPath, "config", env("TOLLGATE_CONFIG", ""), "policy file (env TOLLGATE_CONFIG; default: built-in example policy)")
	fs.StringVar(&cfg.Listen, "listen", env("TOLLGATE_LISTEN", "127.0.0.1:8080"), "HTTP listen address (env TOLLGATE_LISTEN)")
	fs.StringVar(&cfg.RedisURL, "redis", env("TOLLGATE_REDIS", ""), "redis://host:port/db, host:port,host:port or redis+cluster://... (env TOLLGATE_REDIS; default: in-process memory store)")
	fs.StringVar(&cfg.NATSURL, "nats", env("TOLLGATE_NATS", ""), "NATS server URL(s) (env TOLLGATE_NATS; default: embedded NATS server and in-process risk engine)")
	fs.IntVar(&cfg.NATSPort, "nats-port", 0, "port of the embedded NATS server (default: a free port)")
	fs.StringVar(&cfg.SubjectPrefix, "subject-prefix", env("TOLLGATE_SUBJECT_PREFIX", "tollgate."), "prefix of every NATS subject (env TOLLGATE_SUBJECT_PREFIX)")
	fs.StringVar(&cfg.StreamName, "stream-name", env("TOLLGATE_STREAM_NAME", "TOLLGATE"), "prefix of the JetStream stream names (env TOLLGATE_STREAM_NAME)")
	fs.Int64Var(&cfg.DecisionsMaxBytes, "decisions-max-bytes", 1<<30, "bound on the JetStream decisions stream (reserved on the NATS server)")
	fs.Int64Var(&cfg.EventsMaxBytes, "events-max-bytes", int64Env("TOLLGATE_EVENTS_MAX_BYTES", 1<<30), "bound on the JetStream reports-and-alerts stream; the oldest go first (env TOLLGATE_EVENTS_MAX_BYTES; reserved on the NATS server)")
	fs.StringVar(&cfg.AdminToken, "admin-token", env("TOLLGATE_ADMIN_TOKEN", ""), "bearer token for /v1/admin/* (env TOLLGATE_ADMIN_TOKEN; default: admin API off)")
	fs.StringVar(&cfg.APIToken, "api-token", env("TOLLGATE_API_TOKEN", ""), "bearer token for /v1/check, /v1/report and /v1/forward-auth (env TOLLGATE_API_TOKEN; default: none needed)")
	fs.StringVar(&cfg.Upstream, "upstream", env("TOLLGATE_UPSTREAM", ""), "reverse-proxy mode: forward allowed requests to this URL (env TOLLGATE_UPSTREAM)")
	fs.StringVar(&cfg.APIListen, "api-listen", env("TOLLGATE_API_LISTEN", "127.0.0.1:8081"), "proxy mode: address of the limiter's own API and /metrics, never the public one (env TOLLGATE_API_LISTEN)")
	fs.StringVar(&cfg.AttestPrefix, "attest-prefix", env("TOLLGATE_ATTEST_PREFIX", "/v1/attest/"), "proxy mode: path prefix of the attestation endpoints on the public listener (env TOLLGATE_ATTEST_PREFIX)")
	fs.DurationVar(&cfg.BodyTimeout, "body-timeout", durEnv("TOLLGATE_BODY_TIMEOUT", 30*time.Second), "proxy mode: a request body not arrived this long after the request is answered 408 (env TOLLGATE_BODY_TIMEOUT)")
	fs.StringVar(&cfg.UpstreamTransport, "upstream-transport", "lean", "proxy upstream client: lean (round trip on the request's goroutine; https, upgrades and streamed bodies use net/http) or std (net/http for all)")
	fs.StringVar(&cfg.KeyPrefix, "key-prefix", env("TOLLGATE_KEY_PREFIX", "tg:"), "prefix of every Redis key (env TOLLGATE_KEY_PREFIX)")
	fs.DurationVar(&cfg.StoreTimeout, "store-timeout", durEnv("TOLLGATE_STORE_TIMEOUT", 50*time.Millisecond), "deadline of one store round trip (env TOLLGATE_STORE_TIMEOUT)")
	fs.IntVar(&cfg.RedisLanes, "redis-lanes", 4, "Redis round trips in flight at once (concurrent decisions are batched into each)")
	fs.IntVar(&cfg.MemoryMaxKeys, "memory-max-keys", 1<<20, "bound on buckets held by the memory store")
	fs.StringVar(&cfg.PprofListen, "pprof-listen", env("TOLLGATE_PPROF_LISTEN", ""), "serve net/http/pprof on this address (loopback only; off by default)")
	fs.BoolVar(&cfg.NoL1, "no-l1", false, "turn off the local L1 cache in front of Redis")
	fs.DurationVar(&cfg.L1TTL, "l1-ttl", 250*time.Millisecond, "longest the L1 cache reuses a denial or lockout answer: its staleness bound")
	fs.IntVar(&cfg.L1MaxEntries, "l1-max-entries", 100_000, "bound on entries held by the L1 cache")
	fs.BoolVar(&cfg.L1NoMultipliers, "no-l1-multipliers", false, "do not cache subjects' multipliers in the L1 cache (denials and locks still are)")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "how long in-flight requests may take to drain on SIGTERM")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "limiter: unexpected argument %q (commands: validate, budgets)\n", fs.Arg(0))
		return cfg, errors.New("bad arguments")
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "limiter:", err)
		return cfg, err
	}
	return cfg, nil
}

func int64Env(name string, def int64) int64 {
	if v, ok := os.LookupEnv(name); ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	}
	return def
}

func durEnv(name string, def time.Duration) time.Duration {
	if v, ok := os.LookupEnv(name); ok {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}

// policyFlag parses the --config of validate and budgets.
func policyFlag(cmd string, args []string, stderr io.Writer) (string, bool) {
	fs := flag.NewFlagSet("limiter "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", env("TOLLGATE_CONFIG", ""), "policy file")
	if err := fs.Parse(args); err != nil {
		return "", false
	}
	if *path == "" {
		fmt.Fprintf(stderr, "limiter %s: --config FILE is required\n", cmd)
		return "", false
	}
	return *path, true
}

func validate(args []string, stdout, stderr io.Writer) int {
	path, ok := policyFlag("validate", args, stderr)
	if !ok {
		return 2
	}
	p, err := policy.Load(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if a := p.Risk.Attestation; a != nil && a.TokenKeyEnv != "" {
		// the running limiter refuses to start without the device-token key
		if _, err := attestation.TokensFromPolicy(a.TokenKeyEnv, os.Getenv); err != nil {
			fmt.Fprintf(stderr, "%s:%d: risk.attestation.token_key_env: %v\n", path, a.TokenKeyEnvLine, err)
			return 1
		}
	}
	fmt.Fprintf(stdout, "%s: ok (%d routes, %d limits)\n", path, len(p.Routes), len(p.Limits))
	return 0
}

func budgets(args []string, stdout, stderr io.Writer) int {
	path, ok := policyFlag("budgets", args, stderr)
	if !ok {
		return 2
	}
	p, err := policy.Load(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if err := p.WriteBudgets(stdout); err != nil {
		fmt.Fprintln(stderr, "limiter budgets:", err)
		return 1
	}
	return 0
}
