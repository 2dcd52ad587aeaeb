package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/health"
	"github.com/tollgate-dev/tollgate/streams"
)

// RiskdConfig is riskd's configuration.
type RiskdConfig struct {
	// ConfigPath is the policy file ("" uses the built-in example policy).
	ConfigPath string
	// Listen is the HTTP address of /healthz, /readyz, /metrics (default 127.0.0.1:9090).
	Listen string
	// RedisURL is the store riskd writes to (required).
	RedisURL string
	// RedisCA is a PEM file of CA certificates for rediss:// ("" trusts the
	// system roots).
	RedisCA string
	// NATSURL is the NATS server (required).
	NATSURL string
	// NATSCA and NATSCreds are the CA file of a TLS NATS server and a
	// JWT + nkey credentials file (7.5).
	NATSCA, NATSCreds string
	// KeyPrefix and SubjectPrefix must match the limiters'.
	KeyPrefix     string
	SubjectPrefix string
	StreamName    string
	// DecisionsMaxBytes bounds the decisions stream (default 1 GiB).
	DecisionsMaxBytes int64
	// DecisionsMaxAge is how long the decisions stream keeps decisions
	// (default 1h; raise it to replay older traffic, see docs/tuning.md).
	// Must match the limiters'.
	DecisionsMaxAge time.Duration
	// EventsMaxBytes bounds the reports-and-alerts stream (default 1 GiB);
	// give it the limiters' value.
	EventsMaxBytes int64
	// StreamReplicas is how many copies a NATS cluster keeps of every
	// stream and of riskd's durable consumers (default 1; 7.6). Give it the
	// limiters' value.
	StreamReplicas int
	// Durable names riskd's durable consumers (default "riskd").
	Durable string
	// Reassert is how often active lockouts and multipliers are written
	// again, so a Redis that restarted empty gets them back (default 10s).
	Reassert time.Duration
	// LeaseTTL is the leadership lease's time to live: a standby riskd
	// takes over within it when the active one dies (default 5s).
	LeaseTTL time.Duration
	// Logger (default JSON on stderr).
	Logger *slog.Logger
	// Getenv reads the environment variables the policy names: the
	// alerting webhooks' secrets (default os.Getenv).
	Getenv func(string) string
}

// Validate checks the configuration's values without touching the policy
// or the network: cmd/riskd exits 2 (a usage error) on its errors.
func (c *RiskdConfig) Validate() error {
	if c.RedisURL == "" || c.NATSURL == "" {
		return errors.New("service: riskd needs --redis and --nats")
	}
	if _, err := redisOptions(c.RedisURL, c.RedisCA); err != nil {
		return err
	}
	if err := checkNATS(c.NATSURL, streams.Auth{CA: c.NATSCA, Creds: c.NATSCreds}); err != nil {
		return err
	}
	if strings.ContainsAny(c.KeyPrefix, "{}") {
		return fmt.Errorf("service: key prefix %q must not contain braces", c.KeyPrefix)
	}
	if err := streams.CheckNames(c.StreamName, c.SubjectPrefix); err != nil {
		return err
	}
	if err := streams.CheckName("durable", c.Durable); err != nil {
		return err
	}
	if c.DecisionsMaxBytes < 0 {
		return fmt.Errorf("service: decisions max bytes %d must not be negative", c.DecisionsMaxBytes)
	}
	if err := checkReplicas(c.StreamReplicas); err != nil {
		return err
	}
	return checkAddr("listen address", c.Listen)
}

// defaults fills the zero fields (the defaults of defaults.go).
func (c *RiskdConfig) defaults() {
	if c.Listen == "" {
		c.Listen = DefaultRiskdListen
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.Durable == "" {
		c.Durable = DefaultDurable
	}
	if c.Getenv == nil {
		c.Getenv = os.Getenv
	}
}

// streams is the streams' configuration of c.
func (c *RiskdConfig) streams() streams.Config {
	return streams.Config{Prefix: c.SubjectPrefix, Name: c.StreamName, DecisionsMaxBytes: c.DecisionsMaxBytes,
		DecisionsMaxAge: c.DecisionsMaxAge, EventsMaxBytes: c.EventsMaxBytes, Replicas: c.StreamReplicas}
}

// StartRiskd starts riskd and returns once it listens; it stops when ctx
// ends (Done is closed, Err holds why it stopped: nil, or the part that
// failed, such as a consumer of its daemon).
func StartRiskd(ctx context.Context, cfg RiskdConfig) (*Running, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	quietRedis(cfg.Logger)
	g := &group{log: cfg.Logger.With("component", "riskd")}
	run, err := buildRiskd(ctx, cfg, g)
	if err != nil {
		g.abort()
		return nil, err
	}
	g.start(ctx)
	g.finish(ctx, run)
	return run, nil
}

// buildRiskd adds riskd's components to g: the store, the event
// publisher, the risk daemon under its lease, the policy and list
// watchers, the dependency watcher and the HTTP listener.
func buildRiskd(ctx context.Context, cfg RiskdConfig, g *group) (*Running, error) {
	log := g.log
	holder, err := loadPolicy(cfg.ConfigPath, cfg.Logger)
	if err != nil {
		return nil, err
	}
	if err := checkAlertingAtStart(holder, cfg.Getenv); err != nil {
		return nil, err
	}
	st, err := newStore(ctx, storeConfig{RedisURL: cfg.RedisURL, RedisCA: cfg.RedisCA, Prefix: cfg.KeyPrefix, Timeout: riskdStoreTimeout, Logger: log,
		Consequence: "riskd is not ready until it answers"})
	if err != nil {
		return nil, err
	}
	g.add("store", st)
	ev, err := newEvents(ctx, eventsConfig{URL: cfg.NATSURL, Auth: streams.Auth{CA: cfg.NATSCA, Creds: cfg.NATSCreds}, Client: "tollgate-riskd", Streams: cfg.streams(), Dial: true,
		Consequence: "riskd is not ready until it answers", Logger: log})
	if err != nil {
		return nil, err
	}
	g.add("events", ev)
	reg := newRegistry()
	countReloads(reg, holder, nil) // as the limiter: TollgatePolicyReloadFailed watches riskd too
	rk, err := newRisk(riskConfig{Publisher: ev.pub, Store: st.store, Policy: holder.Current, Redis: st.client, KeyPrefix: cfg.KeyPrefix,
		Streams: cfg.streams(), Durable: cfg.Durable, Reassert: cfg.Reassert, LeaseTTL: cfg.LeaseTTL, ShareOffenders: true,
		Registerer: reg, Logger: log, Getenv: cfg.Getenv})
	if err != nil {
		return nil, err
	}
	g.add("risk daemon", rk)
	if err := addWatchers(g, watchConfig{Holder: holder, Path: cfg.ConfigPath}); err != nil {
		return nil, err
	}
	g.add("dependency watcher", componentFunc(func(ctx context.Context) error { watchDeps(ctx, st.client, ev.nc, log); return nil }))
	ready := health.New("standby", riskdProbe(st, ev, rk))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", health.Healthz)
	mux.Handle("GET /readyz", ready)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hl, err := newHTTP(httpConfig{Addr: cfg.Listen, Server: &http.Server{Handler: mux, ReadHeaderTimeout: httpReadHeaderTimeout}, Drain: riskdDrainTimeout, Logger: log})
	if err != nil {
		return nil, err
	}
	g.add("http", hl)
	log.Info("listening", "addr", hl.addr(), "nats", streams.RedactURL(cfg.NATSURL), "redis", RedactURL(cfg.RedisURL))
	run := &Running{Addr: hl.addr(), Done: make(chan struct{})}
	if cfg.ConfigPath != "" {
		run.reload = holder.Reload // cmd/riskd calls it on SIGHUP, as cmd/limiter does
	}
	return run, nil
}

// riskdProbe is riskd's /readyz (6.7): 200 while it leads and consumes
// ("ready") or stands by with its dependencies up ("standby"); 503 while
// starting, after its daemon failed, or while Redis or NATS is
// unreachable, naming each dependency's state, the role and the causes.
func riskdProbe(st *storeComponent, ev *eventsComponent, rk *riskComponent) func(ctx context.Context) health.Probe {
	return func(ctx context.Context) health.Probe {
		// Both at once: a stalled Redis must not spend NATS's deadline.
		var natsState string
		var natsErr error
		natsDone := make(chan struct{})
		go func() { natsState, natsErr = ev.ping(ctx); close(natsDone) }()
		p := health.Probe{Dependencies: map[string]string{}}
		var err error
		p.Dependencies["redis"], err = st.ping(ctx)
		if err != nil {
			p.Causes = append(p.Causes, "redis unreachable: "+err.Error())
		}
		<-natsDone
		p.Dependencies["nats"] = natsState
		if natsErr != nil {
			p.Causes = append(p.Causes, "nats unreachable: "+natsErr.Error())
		}
		var failure string
		p.State, p.Role, failure = rk.status()
		if failure != "" {
			p.Causes = append(p.Causes, "risk daemon failed: "+failure)
		}
		return p
	}
}

// newRegistry is a daemon's Prometheus registry, with the Go and process
// collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// watchDeps checks Redis and NATS every second until ctx ends, logging
// at ERROR each time one becomes unreachable (with the cause) and at INFO
// when it is back.
func watchDeps(ctx context.Context, rc redis.UniversalClient, nc *nats.Conn, log *slog.Logger) {
	var redisDown, natsDown bool
	t := time.NewTicker(depCheckInterval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, depCheckInterval)
		err := rc.Ping(pctx).Err()
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && !redisDown:
			log.Error("redis unreachable: riskd cannot lead, write measures or hold its lease", "err", err)
		case err == nil && redisDown:
			log.Info("redis reachable again")
		}
		redisDown = err != nil
		pctx, cancel = context.WithTimeout(ctx, depCheckInterval)
		_, nerr := pingNATS(pctx, nc)
		cancel()
		if ctx.Err() != nil {
			return
		}
		up := nerr == nil
		switch {
		case !up && !natsDown:
			log.Error("nats unreachable: riskd receives no events", "err", nerr, "status", nc.Status().String())
		case up && natsDown:
			log.Info("nats reachable again")
		}
		natsDown = !up
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// natsCause is the connection's last error, or a generic one.
func natsCause(nc *nats.Conn) error {
	if err := nc.LastError(); err != nil {
		return err
	}
	return errors.New("not connected")
}
