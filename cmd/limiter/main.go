// Command limiter is Tollgate's decision service: the check API, reverse
// proxy, attestation and admin API, and metrics. Run alone it is the whole
// system in one process. `limiter --help` lists its commands and flags.
//
// Exit codes: 0 done (and --help, --version), 1 a failure at run time,
// 2 a usage error (a bad flag, flag value, environment value or argument).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/tollgate-dev/tollgate/internal/cli"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/replay"
	"github.com/tollgate-dev/tollgate/service"
	"github.com/tollgate-dev/tollgate/streams"
)

func main() {
	os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}

// lookupEnv reads an environment variable (os.LookupEnv; tests pass a map).
type lookupEnv func(string) (string, bool)

// flags is every flag of the limiter, bound to c: one line per flag, with
// its environment variable and help text. The commands that start or
// check the limiter (run, validate) share it.
func flags(c *service.Config) []cli.Flag {
	return slices.Concat([]cli.Flag{
		cli.String(&c.ConfigPath, "config", "TOLLGATE_CONFIG", "", "FILE", "policy file (default: the built-in example policy)"),
		cli.String(&c.Listen, "listen", "TOLLGATE_LISTEN", service.DefaultListen, "ADDR", "HTTP listen address (:0 picks a free port; the address is logged)"),
		cli.String(&c.RedisURL, "redis", "TOLLGATE_REDIS", "", "URL", "redis[s]://[user:pass@]host:port/db, redis[s]+cluster://[user:pass@]h1:p1,h2:p2 (or h1:p1,h2:p2), redis[s]+sentinel://[user:pass@]h1:p1,h2:p2/MASTER/db (default: in-process memory store)"),
		cli.String(&c.RedisCA, "redis-ca", "TOLLGATE_REDIS_CA", "", "FILE", "PEM CA certificates a rediss:// server's certificate must chain to (default: the system roots)"),
		cli.String(&c.NATSURL, "nats", "TOLLGATE_NATS", "", "URL", "NATS server URL(s), comma-separated (default: embedded NATS server and in-process risk engine); nats://user:pass@host:port, tls:// or nats+tls:// for TLS"),
	}, streams.AuthFlags(&c.NATSCA, &c.NATSCreds), []cli.Flag{
		cli.Int(&c.NATSPort, "nats-port", "TOLLGATE_NATS_PORT", 0, "port of the embedded NATS server (default: a free port)"),
		cli.String(&c.NATSStoreDir, "nats-store-dir", "TOLLGATE_NATS_STORE_DIR", "", "DIR", "JetStream directory of the embedded NATS server (audit record, alerts), kept across restarts (default: with --redis one under the user's cache dir, named for the Redis URL; else a temp dir)"),
		cli.String(&c.SubjectPrefix, "subject-prefix", "TOLLGATE_SUBJECT_PREFIX", service.DefaultSubjectPrefix, "PREFIX", "prefix of every NATS subject"),
		cli.String(&c.StreamName, "stream-name", "TOLLGATE_STREAM_NAME", service.DefaultStreamName, "NAME", "prefix of the JetStream stream names"),
		cli.Int64(&c.DecisionsMaxBytes, "decisions-max-bytes", "TOLLGATE_DECISIONS_MAX_BYTES", service.DefaultStreamMaxBytes, "bound on the JetStream decisions stream, in bytes (reserved on the NATS server)").Positive(),
		cli.Duration(&c.DecisionsMaxAge, "decisions-max-age", "TOLLGATE_DECISIONS_MAX_AGE", service.DefaultDecisionsMaxAge, "how long the decisions stream keeps decisions; raise it to replay older traffic (limiter replay); riskd's must be the same").Positive(),
		cli.Int(&c.StreamReplicas, "stream-replicas", "TOLLGATE_STREAM_REPLICAS", service.DefaultStreamReplicas, "copies a NATS cluster keeps of every JetStream stream (3 on a three-node cluster; docs/scaling.md); riskd's must be the same").Positive(),
		cli.Int64(&c.EventsMaxBytes, "events-max-bytes", "TOLLGATE_EVENTS_MAX_BYTES", service.DefaultStreamMaxBytes, "bound on the JetStream reports-and-alerts stream, in bytes; the oldest go first (reserved on the NATS server)").Positive(),
		cli.Secret(&c.AdminToken, "admin-token", "TOLLGATE_ADMIN_TOKEN", "TOKEN", "bearer token for /v1/admin/* (default: admin API off)"),
		cli.String(&c.GRPCListen, "grpc-listen", "TOLLGATE_GRPC_LISTEN", "", "ADDR", "serve Envoy's rate-limit service (gRPC, envoy.service.ratelimit.v3) on this address (default: off)"),
		cli.String(&c.TLS.Cert, "tls-cert", "TOLLGATE_TLS_CERT", "", "FILE", "--listen speaks TLS with this PEM certificate chain (with --tls-key; reloaded when the files change)"),
		cli.String(&c.TLS.Key, "tls-key", "TOLLGATE_TLS_KEY", "", "FILE", "the PEM private key of --tls-cert"),
		cli.String(&c.TLS.ClientCA, "tls-client-ca", "TOLLGATE_TLS_CLIENT_CA", "", "FILE", "require client certificates on --listen that chain to these PEM CAs (mTLS)"),
		cli.String(&c.APITLS.Cert, "api-tls-cert", "TOLLGATE_API_TLS_CERT", "", "FILE", "proxy mode: --api-listen speaks TLS with this PEM certificate chain (with --api-tls-key)"),
		cli.String(&c.APITLS.Key, "api-tls-key", "TOLLGATE_API_TLS_KEY", "", "FILE", "the PEM private key of --api-tls-cert"),
		cli.String(&c.APITLS.ClientCA, "api-tls-client-ca", "TOLLGATE_API_TLS_CLIENT_CA", "", "FILE", "require client certificates on --api-listen that chain to these PEM CAs (mTLS)"),
		cli.String(&c.GRPCTLS.Cert, "grpc-tls-cert", "TOLLGATE_GRPC_TLS_CERT", "", "FILE", "--grpc-listen speaks TLS with this PEM certificate chain (with --grpc-tls-key)"),
		cli.String(&c.GRPCTLS.Key, "grpc-tls-key", "TOLLGATE_GRPC_TLS_KEY", "", "FILE", "the PEM private key of --grpc-tls-cert"),
		cli.String(&c.GRPCTLS.ClientCA, "grpc-tls-client-ca", "TOLLGATE_GRPC_TLS_CLIENT_CA", "", "FILE", "require client certificates on --grpc-listen that chain to these PEM CAs (mTLS, as Envoy's rate-limit cluster is often set up)"),
		cli.Int(&c.GRPCMaxStreams, "grpc-max-streams", "TOLLGATE_GRPC_MAX_STREAMS", service.DefaultGRPCMaxStreams, "calls open at once on one gRPC connection; more are refused with REFUSED_STREAM").Positive(),
		cli.Duration(&c.GRPCIdleTimeout, "grpc-idle-timeout", "TOLLGATE_GRPC_IDLE_TIMEOUT", service.DefaultGRPCIdleTimeout, "close a gRPC connection that has had no call open this long, and recycle (GOAWAY) every connection at this age, freeing the stuck calls of a client that stopped reading").Positive(),
		cli.Secret(&c.APIToken, "api-token", "TOLLGATE_API_TOKEN", "TOKEN", "bearer token /v1/check, /v1/report and /v1/forward-auth require (default: none needed)"),
		cli.String(&c.Upstream, "upstream", "TOLLGATE_UPSTREAM", "", "URL", "reverse-proxy mode: forward allowed requests to this http(s) URL"),
		cli.String(&c.APIListen, "api-listen", "TOLLGATE_API_LISTEN", service.DefaultAPIListen, "ADDR", "proxy mode: address of the limiter's own API (/v1/check, /v1/report, /v1/admin/*, /v1/forward-auth) and /metrics; never the public one"),
		cli.String(&c.AttestPrefix, "attest-prefix", "TOLLGATE_ATTEST_PREFIX", service.DefaultAttestPrefix, "PATH", "proxy mode: path prefix of the attestation endpoints on the public listener"),
		cli.Duration(&c.BodyTimeout, "body-timeout", "TOLLGATE_BODY_TIMEOUT", service.DefaultBodyTimeout, "proxy mode: a request body not arrived this long after the request is answered 408").Positive(),
		cli.Duration(&c.UpstreamTimeout, "upstream-timeout", "TOLLGATE_UPSTREAM_TIMEOUT", service.DefaultUpstreamTimeout, "proxy mode: an upstream that has not answered (status and headers) this long gets the client 504 UPSTREAM_TIMEOUT").Positive(),
		cli.Duration(&c.ProxyIdleTimeout, "proxy-idle-timeout", "TOLLGATE_PROXY_IDLE_TIMEOUT", service.DefaultProxyIdleTimeout, "proxy mode: a response that moves no byte (from the upstream or to the client) this long is cut; no total deadline").Positive(),
		cli.String(&c.KeyPrefix, "key-prefix", "TOLLGATE_KEY_PREFIX", service.DefaultKeyPrefix, "PREFIX", "prefix of every Redis key"),
		cli.Duration(&c.StoreTimeout, "store-timeout", "TOLLGATE_STORE_TIMEOUT", service.DefaultStoreTimeout, "deadline of each check's store work from its arrival (lane wait, dial, write, read); past it the failure mode answers").Positive(),
		cli.Int(&c.RedisLanes, "redis-lanes", "TOLLGATE_REDIS_LANES", service.DefaultRedisLanes, "Redis round trips in flight at once (concurrent decisions are batched into each)").Positive(),
		cli.Int(&c.MemoryMaxKeys, "memory-max-keys", "TOLLGATE_MEMORY_MAX_KEYS", service.DefaultMemoryMaxKeys, "bound on buckets held by the memory store").Positive(),
		cli.String(&c.PprofListen, "pprof-listen", "TOLLGATE_PPROF_LISTEN", "", "ADDR", "serve net/http/pprof on this address (keep it on loopback; default off)"),
		cli.Bool(&c.NoForwardAuth, "no-forward-auth", "TOLLGATE_NO_FORWARD_AUTH", false, "turn /v1/forward-auth off (404); a policy with a concurrency limit needs it, as a gateway never says when a request ends"),
		cli.Bool(&c.NoL1, "no-l1", "TOLLGATE_NO_L1", false, "turn off the local L1 cache in front of Redis"),
		cli.Duration(&c.L1TTL, "l1-ttl", "TOLLGATE_L1_TTL", service.DefaultL1TTL, "longest the L1 cache reuses a denial or lockout answer: its staleness bound").Positive(),
		cli.Int(&c.L1MaxEntries, "l1-max-entries", "TOLLGATE_L1_MAX_ENTRIES", service.DefaultL1MaxEntries, "bound on entries held by the L1 cache").Positive(),
		cli.Bool(&c.L1NoMultipliers, "no-l1-multipliers", "TOLLGATE_NO_L1_MULTIPLIERS", false, "do not cache subjects' multipliers in the L1 cache (denials and locks still are)"),
		cli.Duration(&c.ShutdownTimeout, "shutdown-timeout", "TOLLGATE_SHUTDOWN_TIMEOUT", service.DefaultShutdownTimeout, "how long in-flight requests may take to drain on SIGTERM, on every listener at once (then they are cut; exit 0)").Positive(),
	})
}

// command is a subcommand: its --help entry and what runs it (nil: the
// service itself).
type command struct {
	cli.Command
	run func(args []string, env lookupEnv, stdout, stderr io.Writer) int
}

// commands lists the limiter's commands for dispatch and --help, one line
// each (a function, since help, which the commands reach, lists them).
func commands() []command {
	return []command{
		{cli.Command{Args: "[flags]", Summary: "run the service", Example: "limiter --config policy/example.yaml --redis redis://127.0.0.1:6379/0 --nats nats://127.0.0.1:4222"}, nil},
		{cli.Command{Name: "validate", Args: "--config FILE [flags]", Summary: "run every check a start runs (policy, files and env vars it names) and exit: 0 ok, 1 FILE:LINE errors", Example: "limiter validate --config policy/example.yaml"}, validate},
		{cli.Command{Name: "budgets", Args: "--config FILE", Summary: "print every budget as a Markdown table, for mobile teams", Example: "limiter budgets --config policy/example.yaml"}, budgets},
		{cli.Command{Name: "replay", Args: "--nats URL --config CANDIDATE.yaml [--baseline CURRENT.yaml] [--since 1h | --from-seq N] [--json]",
			Summary: "re-run recorded traffic under a candidate policy and a baseline; report what changed and for whom (docs/tuning.md; flags: limiter replay --help)",
			Example: "limiter replay --nats nats://127.0.0.1:4222 --config stricter.yaml --baseline policy.yaml --since 24h"}, replayCmd},
	}
}

// help writes --help.
func help(w io.Writer) {
	var c service.Config
	var cmds []cli.Command
	for _, c := range commands() {
		cmds = append(cmds, c.Command)
	}
	cli.WriteHelp(w, cli.Help{
		Name:     "limiter",
		Summary:  "Tollgate's decision service: check API, reverse proxy, attestation and admin API, metrics.",
		Commands: cmds,
		Flags:    flags(&c),
		Notes: `Exit codes: 0 done, 1 a failure at run time, 2 a usage error (flag, value, environment variable).
Without --redis and --nats the limiter is the whole system in one process. Docs: README.md, docs/deploy.md.`,
	})
}

// run is main without the exit, for tests.
func run(args []string, env lookupEnv, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		for _, c := range commands() {
			if c.Name != "" && c.Name == args[0] {
				return c.run(args[1:], env, stdout, stderr)
			}
		}
	}
	var cfg service.Config
	if code, ok := parse("limiter", &cfg, args, env, stdout, stderr); !ok {
		return code
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "limiter:", err)
		return cli.ExitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := notifyHUP() // before the start: a SIGHUP while starting must not end the process
	defer signal.Stop(hup)
	r, err := service.Start(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "limiter:", err)
		return cli.ExitFailure
	}
	reloadOnHUP(r, hup)
	if r.Err != nil {
		fmt.Fprintln(stderr, "limiter:", r.Err)
		return cli.ExitFailure
	}
	return cli.ExitOK
}

// notifyHUP catches SIGHUP from now on: one that arrives while the limiter
// starts is kept for reloadOnHUP (Go's default action would end the
// process).
func notifyHUP() chan os.Signal {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup
}

// reloadOnHUP rereads the policy file on each SIGHUP of hup (one received
// while starting included) until the limiter has stopped; a refused file is
// logged and counted, and the policy in force stays.
func reloadOnHUP(r *service.Running, hup <-chan os.Signal) {
	for {
		select {
		case <-hup:
			_ = r.Reload()
		case <-r.Done:
			return
		}
	}
}

// parse parses the limiter's flags and environment into cfg. When it
// returns ok false the command is over with exit code code: --help and
// --version print and give 0, a usage error prints and gives 2.
func parse(cmd string, cfg *service.Config, args []string, env lookupEnv, stdout, stderr io.Writer) (code int, ok bool) {
	rest, err := cli.Parse(cmd, flags(cfg), args, env)
	if err == nil && len(rest) > 0 {
		err = cli.Usagef("%s: unexpected argument %q (commands: validate, budgets, replay; see limiter --help)", cmd, rest[0])
	}
	return finish(err, stdout, stderr)
}

// finish maps a parse error to its output and exit code.
func finish(err error, stdout, stderr io.Writer) (int, bool) {
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, cli.ErrHelp):
		help(stdout)
		return cli.ExitOK, false
	case errors.Is(err, cli.ErrVersion):
		fmt.Fprintln(stdout, cli.Version("limiter"))
		return cli.ExitOK, false
	}
	fmt.Fprintln(stderr, err)
	return cli.ExitUsage, false
}

// getenv adapts a lookupEnv to the func(string) string the service reads
// the policy's variables with.
func getenv(env lookupEnv) func(string) string {
	return func(k string) string { v, _ := env(k); return v }
}

// validate runs every check a start runs (service.Check) without starting.
func validate(args []string, env lookupEnv, stdout, stderr io.Writer) int {
	var cfg service.Config
	if code, ok := parse("limiter validate", &cfg, args, env, stdout, stderr); !ok {
		return code
	}
	if cfg.ConfigPath == "" {
		fmt.Fprintln(stderr, "limiter validate: --config FILE (or TOLLGATE_CONFIG) is required")
		return cli.ExitUsage
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "limiter validate:", err)
		return cli.ExitUsage
	}
	cfg.Getenv = getenv(env)
	p, err := service.Check(cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return cli.ExitFailure
	}
	fmt.Fprintf(stdout, "%s: ok (%d routes, %d limits)\n", cfg.ConfigPath, len(p.Routes), len(p.Limits))
	return cli.ExitOK
}

// budgets prints the policy's budgets as a Markdown table.
// replayCmd runs `limiter replay`; its flags and logic are package replay's.
func replayCmd(args []string, env lookupEnv, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return replay.Command(ctx, args, env, stdout, stderr)
}

func budgets(args []string, env lookupEnv, stdout, stderr io.Writer) int {
	var path string
	rest, err := cli.Parse("limiter budgets", []cli.Flag{
		cli.String(&path, "config", "TOLLGATE_CONFIG", "", "FILE", "policy file"),
	}, args, env)
	if err == nil && len(rest) > 0 {
		err = cli.Usagef("limiter budgets: unexpected argument %q", rest[0])
	}
	if err == nil && path == "" {
		err = cli.Usagef("limiter budgets: --config FILE (or TOLLGATE_CONFIG) is required")
	}
	if code, ok := finish(err, stdout, stderr); !ok {
		return code
	}
	p, err := policy.Load(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return cli.ExitFailure
	}
	if err := p.WriteBudgets(stdout); err != nil {
		fmt.Fprintln(stderr, "limiter budgets:", err)
		return cli.ExitFailure
	}
	return cli.ExitOK
}
