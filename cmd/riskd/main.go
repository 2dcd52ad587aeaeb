// Command riskd is Tollgate's risk daemon: it consumes decisions and
// reports from NATS JetStream, computes abuse signals, writes lockouts and
// multipliers to Redis and publishes alerts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/tollgate-dev/tollgate/service"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func run(args []string, stderr io.Writer) int {
	var cfg service.RiskdConfig
	fs := flag.NewFlagSet("riskd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.ConfigPath, "config", env("TOLLGATE_CONFIG", ""), "policy file (env TOLLGATE_CONFIG; default: built-in example policy)")
	fs.StringVar(&cfg.Listen, "listen", env("TOLLGATE_LISTEN", "127.0.0.1:9090"), "HTTP address of /healthz, /readyz, /metrics (env TOLLGATE_LISTEN)")
	fs.StringVar(&cfg.RedisURL, "redis", env("TOLLGATE_REDIS", ""), "Redis the limiters use (env TOLLGATE_REDIS; required)")
	fs.StringVar(&cfg.NATSURL, "nats", env("TOLLGATE_NATS", ""), "NATS server URL(s) (env TOLLGATE_NATS; required)")
	fs.StringVar(&cfg.KeyPrefix, "key-prefix", env("TOLLGATE_KEY_PREFIX", "tg:"), "prefix of every Redis key (must match the limiters')")
	fs.StringVar(&cfg.SubjectPrefix, "subject-prefix", env("TOLLGATE_SUBJECT_PREFIX", "tollgate."), "prefix of every NATS subject (must match the limiters')")
	fs.StringVar(&cfg.StreamName, "stream-name", env("TOLLGATE_STREAM_NAME", "TOLLGATE"), "prefix of the JetStream stream names (env TOLLGATE_STREAM_NAME)")
	fs.Int64Var(&cfg.DecisionsMaxBytes, "decisions-max-bytes", 1<<30, "bound on the JetStream decisions stream (reserved on the NATS server)")
	fs.Int64Var(&cfg.EventsMaxBytes, "events-max-bytes", 1<<30, "bound on the JetStream reports-and-alerts stream; give the limiters' value (reserved on the NATS server)")
	fs.StringVar(&cfg.Durable, "durable", env("TOLLGATE_DURABLE", "riskd"), "name of riskd's durable consumers")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if cfg.RedisURL == "" || cfg.NATSURL == "" {
		fmt.Fprintln(stderr, "riskd: --redis and --nats are required")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := service.StartRiskd(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "riskd:", err)
		return 1
	}
	<-r.Done
	if r.Err != nil {
		fmt.Fprintln(stderr, "riskd:", r.Err)
		return 1
	}
	return 0
}
