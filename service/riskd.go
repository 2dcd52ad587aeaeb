package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/risk"
	"github.com/tollgate-dev/tollgate/signals"
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
	if strings.ContainsAny(c.KeyPrefix, "{}") {
		return fmt.Errorf("service: key prefix %q must not contain braces", c.KeyPrefix)
	}
	if c.DecisionsMaxBytes < 0 {
		return fmt.Errorf("service: decisions max bytes %d must not be negative", c.DecisionsMaxBytes)
	}
	return checkAddr("listen address", c.Listen)
}

// riskdState is what riskd's /readyz reports: its role and the last
// failure of its daemon. Safe for concurrent use.
type riskdState struct {
	state   atomic.Value // "standby", "starting", "ready"
	failure atomic.Value // "" or why the daemon last stopped (until it is ready again)
}

func newRiskdState() *riskdState {
	s := &riskdState{}
	s.state.Store("standby")
	s.failure.Store("")
	return s
}

// lead runs the daemon while this instance holds the lease: acquire,
// replay and consume, and stop consuming the moment the lease is lost. A
// daemon that fails (a consumer gone) is logged at ERROR, makes riskd not
// ready until a new one is ready, and is started again after a pause.
func lead(ctx context.Context, lease *risk.Lease, newDaemon func() (*risk.Daemon, error), st *riskdState, metrics *risk.Metrics, log *slog.Logger) error {
	for ctx.Err() == nil {
		st.state.Store("standby")
		metrics.StandBy()
		if err := lease.Acquire(ctx, 500*time.Millisecond); err != nil {
			return nil
		}
		st.state.Store("starting")
		metrics.Leader.Set(1)
		log.Info("leadership acquired; replaying state")
		d, err := newDaemon()
		if err != nil {
			return err
		}
		tctx, cancel := context.WithCancel(ctx)
		held := make(chan error, 1)
		go func() { held <- lease.Hold(tctx) }()
		go func() {
			select {
			case <-d.Ready():
				st.state.Store("ready")
				st.failure.Store("")
			case <-tctx.Done():
			}
		}()
		runErr := make(chan error, 1)
		go func() { runErr <- d.Run(tctx) }()
		select {
		case err := <-held:
			log.Warn("leadership lost; standing by", "err", err)
			cancel()
			<-runErr
		case err := <-runErr:
			cancel()
			<-held
			if err != nil && ctx.Err() == nil {
				st.failure.Store(err.Error())
				log.Error("risk daemon stopped; not ready, retrying", "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	}
	return nil
}

// storeLost returns a risk.Options.StoreLost over rc: it keeps a marker
// key in Redis and reports true whenever the marker is missing (a Redis
// that restarted empty, or the first call).
func storeLost(rc redis.UniversalClient, key string) func(ctx context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		n, err := rc.Exists(ctx, key).Result()
		if err != nil || n == 1 {
			return false, err
		}
		if err := rc.Set(ctx, key, time.Now().UTC().Format(time.RFC3339), 0).Err(); err != nil {
			return false, err
		}
		return true, nil
	}
}

// watchDeps checks Redis and NATS every second until ctx ends, logging
// at ERROR each time one becomes unreachable (with the cause) and at INFO
// when it is back.
func watchDeps(ctx context.Context, rc redis.UniversalClient, nc *nats.Conn, log *slog.Logger) {
	var redisDown, natsDown bool
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
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
		up := nc.IsConnected()
		switch {
		case !up && !natsDown:
			log.Error("nats unreachable: riskd receives no events", "err", natsCause(nc), "status", nc.Status().String())
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

// readyz serves riskd's /readyz: 200 while it leads and consumes ("ready")
// or stands by with its dependencies up ("standby"); 503 while starting,
// after its daemon failed, or while Redis or NATS is unreachable. The body
// names each dependency's state, the role (leader or standby) and the
// cause of a 503.
func readyz(rc redis.UniversalClient, nc *nats.Conn, st *riskdState) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		deps := map[string]string{"redis": "up", "nats": "up"}
		var causes []string
		if err := rc.Ping(ctx).Err(); err != nil {
			deps["redis"] = "down"
			causes = append(causes, "redis unreachable: "+err.Error())
		}
		if !nc.IsConnected() {
			deps["nats"] = "down"
			causes = append(causes, "nats unreachable: "+natsCause(nc).Error())
		}
		status := st.state.Load().(string)
		role := "standby"
		if status != "standby" {
			role = "leader"
		}
		if f := st.failure.Load().(string); f != "" {
			causes = append(causes, "risk daemon failed: "+f)
		}
		code := http.StatusOK
		switch {
		case len(causes) > 0:
			status, code = "not_ready", http.StatusServiceUnavailable
		case status == "starting":
			code = http.StatusServiceUnavailable
		}
		body := map[string]any{"status": status, "role": role, "dependencies": deps}
		if len(causes) > 0 {
			body["error"] = strings.Join(causes, "; ")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(body)
	}
}

// StartRiskd starts the risk daemon and its HTTP endpoints; it stops when
// ctx ends.
func StartRiskd(ctx context.Context, cfg RiskdConfig) (*Running, error) {
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:9090"
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = "tg:"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 5 * time.Second
	}
	if cfg.Durable == "" {
		cfg.Durable = "riskd"
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "riskd")
	quietRedis(cfg.Logger)
	holder, err := loadPolicy(cfg.ConfigPath, cfg.Logger)
	if err != nil {
		return nil, err
	}

	opts, err := redisOptions(cfg.RedisURL, cfg.RedisCA)
	if err != nil {
		return nil, err
	}
	opts.MaxRetries = 2
	rc := redis.NewUniversalClient(opts)
	dialRedisOnce(ctx, log, rc, cfg.RedisURL, "riskd is not ready until it answers")
	dialNATSOnce(log, cfg.NATSURL, "riskd is not ready until it answers")
	store := bucket.NewRedisStore(rc, bucket.RedisOptions{Timeout: time.Second, Prefix: cfg.KeyPrefix})

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	nc, err := streams.Connect(cfg.NATSURL, "tollgate-riskd")
	if err != nil {
		_ = store.Close()
		_ = rc.Close()
		return nil, err
	}
	scfg := streams.Config{Prefix: cfg.SubjectPrefix, Name: cfg.StreamName, DecisionsMaxBytes: cfg.DecisionsMaxBytes,
		DecisionsMaxAge: cfg.DecisionsMaxAge, EventsMaxBytes: cfg.EventsMaxBytes}
	pub, err := streams.NewPublisher(nc, streams.PublisherOptions{Config: scfg})
	if err != nil {
		nc.Close()
		return nil, err
	}
	metrics := risk.NewMetrics(reg)
	newDaemon := func() (*risk.Daemon, error) {
		return risk.New(risk.Options{
			Publisher: pub, Store: store, Policy: holder.Current, Streams: scfg, Durable: cfg.Durable,
			Metrics: metrics, Logger: log, Reassert: cfg.Reassert,
			StoreLost: storeLost(rc, bucket.StoreEpochKey(cfg.KeyPrefix, cfg.Durable)),
			OffenderSink: func(ctx context.Context, list []signals.Offender) error {
				b, err := json.Marshal(list)
				if err != nil {
					return err
				}
				return rc.Set(ctx, offendersKey(cfg.KeyPrefix), b, 2*time.Minute).Err()
			},
		})
	}
	if _, err := newDaemon(); err != nil {
		pub.Close()
		nc.Close()
		return nil, err
	}
	owner := ulid.Make().String()
	lease := risk.NewLease(rc, bucket.LeaderKey(cfg.KeyPrefix, cfg.Durable), owner, cfg.LeaseTTL)
	st := newRiskdState()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`+"\n")
	})
	mux.HandleFunc("GET /readyz", readyz(rc, nc, st))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		pub.Close()
		nc.Close()
		return nil, fmt.Errorf("service: listen %s: %w", cfg.Listen, err)
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	run := &Running{Addr: ln.Addr().String(), Done: make(chan struct{})}
	log.Info("listening", "addr", run.Addr, "nats", RedactURL(cfg.NATSURL), "redis", RedactURL(cfg.RedisURL))
	go func() { _ = hs.Serve(ln) }()

	dctx, stop := context.WithCancel(context.Background())
	derr := make(chan error, 1)
	go func() { derr <- lead(dctx, lease, newDaemon, st, metrics, log) }()
	go watchDeps(dctx, rc, nc, log)
	watchCtx, stopWatch := context.WithCancel(context.Background())
	if cfg.ConfigPath != "" {
		go holder.Watch(watchCtx, 0)
	}
	go func() {
		defer close(run.Done)
		select {
		case <-ctx.Done():
		case err := <-derr:
			run.Err = err
		}
		stop()
		stopWatch()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = hs.Shutdown(sctx)
		cancel()
		if run.Err == nil {
			if err := <-derr; err != nil {
				run.Err = err
			}
		}
		pub.Close()
		nc.Close()
		_ = store.Close()
		_ = rc.Close()
		log.Info("stopped")
	}()
	return run, nil
}
