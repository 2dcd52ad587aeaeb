// Command riskd is Tollgate's risk daemon: it consumes decisions and
// reports from NATS JetStream, computes abuse signals, writes lockouts and
// multipliers to Redis and publishes alerts. `riskd --help` lists its
// flags.
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
	"github.com/tollgate-dev/tollgate/service"
	"github.com/tollgate-dev/tollgate/streams"
)

func main() {
	os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}

// flags is every flag of riskd, bound to c: one line per flag, with its
// environment variable and help text.
func flags(c *service.RiskdConfig) []cli.Flag {
	return slices.Concat([]cli.Flag{
		cli.String(&c.ConfigPath, "config", "TOLLGATE_CONFIG", "", "FILE", "policy file, the limiters' (default: the built-in example policy)"),
		cli.String(&c.Listen, "listen", "TOLLGATE_LISTEN", service.DefaultRiskdListen, "ADDR", "HTTP address of /healthz, /readyz, /metrics"),
		cli.String(&c.RedisURL, "redis", "TOLLGATE_REDIS", "", "URL", "the limiters' Redis, in the same URL forms as the limiter's --redis (required)"),
		cli.String(&c.RedisCA, "redis-ca", "TOLLGATE_REDIS_CA", "", "FILE", "PEM CA certificates a rediss:// server's certificate must chain to (default: the system roots)"),
		cli.String(&c.NATSURL, "nats", "TOLLGATE_NATS", "", "URL", "NATS server URL(s), comma-separated (required); nats://user:pass@host:port, tls:// or nats+tls:// for TLS"),
	}, streams.AuthFlags(&c.NATSCA, &c.NATSCreds), []cli.Flag{
		cli.String(&c.KeyPrefix, "key-prefix", "TOLLGATE_KEY_PREFIX", service.DefaultKeyPrefix, "PREFIX", "prefix of every Redis key (must match the limiters')"),
		cli.String(&c.SubjectPrefix, "subject-prefix", "TOLLGATE_SUBJECT_PREFIX", service.DefaultSubjectPrefix, "PREFIX", "prefix of every NATS subject (must match the limiters')"),
		cli.String(&c.StreamName, "stream-name", "TOLLGATE_STREAM_NAME", service.DefaultStreamName, "NAME", "prefix of the JetStream stream names (must match the limiters')"),
		cli.Int64(&c.DecisionsMaxBytes, "decisions-max-bytes", "TOLLGATE_DECISIONS_MAX_BYTES", service.DefaultStreamMaxBytes, "bound on the JetStream decisions stream, in bytes (reserved on the NATS server)").Positive(),
		cli.Duration(&c.DecisionsMaxAge, "decisions-max-age", "TOLLGATE_DECISIONS_MAX_AGE", service.DefaultDecisionsMaxAge, "how long the decisions stream keeps decisions (for limiter replay); must match the limiters'").Positive(),
		cli.Int(&c.StreamReplicas, "stream-replicas", "TOLLGATE_STREAM_REPLICAS", service.DefaultStreamReplicas, "copies a NATS cluster keeps of every JetStream stream and of riskd's consumers (3 on a three-node cluster; docs/scaling.md); give the limiters' value").Positive(),
		cli.Int64(&c.EventsMaxBytes, "events-max-bytes", "TOLLGATE_EVENTS_MAX_BYTES", service.DefaultStreamMaxBytes, "bound on the JetStream reports-and-alerts stream, in bytes; give the limiters' value (reserved on the NATS server)").Positive(),
		cli.String(&c.Durable, "durable", "TOLLGATE_DURABLE", service.DefaultDurable, "NAME", "name of riskd's durable consumers and of its leadership lease"),
	})
}

// help writes --help.
func help(w io.Writer) {
	var c service.RiskdConfig
	cli.WriteHelp(w, cli.Help{
		Name:    "riskd",
		Summary: "Tollgate's risk daemon: abuse signals from NATS events, lockouts and multipliers in Redis, alerts.",
		Commands: []cli.Command{{Args: "--redis URL --nats URL [flags]", Summary: "run the daemon (several may run: one leads, the others stand by)",
			Example: "riskd --config policy/example.yaml --redis redis://127.0.0.1:6379/0 --nats nats://127.0.0.1:4222"}},
		Flags: flags(&c),
		Notes: "Exit codes: 0 done, 1 a failure at run time, 2 a usage error (flag, value, environment variable).\nDocs: README.md, docs/deploy.md.",
	})
}

// run is main without the exit, for tests.
func run(args []string, env func(string) (string, bool), stdout, stderr io.Writer) int {
	var cfg service.RiskdConfig
	rest, err := cli.Parse("riskd", flags(&cfg), args, env)
	if err == nil && len(rest) > 0 {
		err = cli.Usagef("riskd: unexpected argument %q (see riskd --help)", rest[0])
	}
	if err == nil {
		if verr := cfg.Validate(); verr != nil {
			err = cli.Usagef("riskd: %v", verr)
		}
	}
	switch {
	case errors.Is(err, cli.ErrHelp):
		help(stdout)
		return cli.ExitOK
	case errors.Is(err, cli.ErrVersion):
		fmt.Fprintln(stdout, cli.Version("riskd"))
		return cli.ExitOK
	case err != nil:
		fmt.Fprintln(stderr, err)
		return cli.ExitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := notifyHUP() // before the start: a SIGHUP while starting must not end the process
	defer signal.Stop(hup)
	r, err := service.StartRiskd(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "riskd:", err)
		return cli.ExitFailure
	}
	reloadOnHUP(r, hup)
	if r.Err != nil {
		fmt.Fprintln(stderr, "riskd:", r.Err)
		return cli.ExitFailure
	}
	return cli.ExitOK
}

// notifyHUP catches SIGHUP from now on: one that arrives while riskd
// starts is kept for reloadOnHUP (Go's default action would end the
// process).
func notifyHUP() chan os.Signal {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup
}

// reloadOnHUP rereads the policy file on each SIGHUP of hup (one received
// while starting included) until riskd has stopped; a refused file is
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
