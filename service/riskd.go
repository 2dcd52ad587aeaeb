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
	"sync/atomic"
	"time"

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
	// NATSURL is the NATS server (required).
	NATSURL string
	// KeyPrefix and SubjectPrefix must match the limiters'.
	KeyPrefix     string
	SubjectPrefix string
	StreamName    string
	// DecisionsMaxBytes bounds the decisions stream (default 1 GiB).
	DecisionsMaxBytes int64
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

// lead runs the daemon while this instance holds the lease: acquire,
// replay and consume, and stop consuming the moment the lease is lost.
func lead(ctx context.Context, lease *risk.Lease, newDaemon func() (*risk.Daemon, error), state *atomic.Value, metrics *risk.Metrics, log *slog.Logger) error {
	for ctx.Err() == nil {
		state.Store("standby")
		metrics.StandBy()
		if err := lease.Acquire(ctx, 500*time.Millisecond); err != nil {
			return nil
		}
		state.Store("starting")
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
				state.Store("ready")
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
				log.Error("risk daemon stopped; retrying", "err", err)
				time.Sleep(time.Second)
			}
		}
	}
	return nil
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
	if cfg.RedisURL == "" || cfg.NATSURL == "" {
		return nil, errors.New("service: riskd needs --redis and --nats")
	}
	log := cfg.Logger.With("component", "riskd")
	quietRedis(cfg.Logger)
	holder, err := loadPolicy(cfg.ConfigPath, cfg.Logger)
	if err != nil {
		return nil, err
	}

	opts, err := RedisOptions(cfg.RedisURL)
	if err != nil {
		return nil, err
	}
	opts.MaxRetries = 2
	rc := redis.NewUniversalClient(opts)
	store := bucket.NewRedisStore(rc, bucket.RedisOptions{Timeout: time.Second})

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	nc, err := streams.Connect(cfg.NATSURL, "tollgate-riskd")
	if err != nil {
		_ = store.Close()
		_ = rc.Close()
		return nil, err
	}
	scfg := streams.Config{Prefix: cfg.SubjectPrefix, Name: cfg.StreamName, DecisionsMaxBytes: cfg.DecisionsMaxBytes, EventsMaxBytes: cfg.EventsMaxBytes}
	pub, err := streams.NewPublisher(nc, streams.PublisherOptions{Config: scfg})
	if err != nil {
		nc.Close()
		return nil, err
	}
	metrics := risk.NewMetrics(reg)
	newDaemon := func() (*risk.Daemon, error) {
		return risk.New(risk.Options{
			Publisher: pub, Store: store, Policy: holder.Current, Prefix: cfg.KeyPrefix, Streams: scfg, Durable: cfg.Durable,
			Metrics: metrics, Logger: log, Reassert: cfg.Reassert,
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
	lease := risk.NewLease(rc, cfg.KeyPrefix+"riskd:"+cfg.Durable+":leader", owner, cfg.LeaseTTL)
	var state atomic.Value // "standby", "starting", "ready"
	state.Store("standby")

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`+"\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		deps := map[string]string{"redis": "up", "nats": "up"}
		if rc.Ping(ctx).Err() != nil {
			deps["redis"] = "down"
		}
		if !nc.IsConnected() {
			deps["nats"] = "down"
		}
		// A standby (another riskd holds the lease) is healthy and ready to
		// take over: 200 with status "standby".
		status := state.Load().(string)
		w.Header().Set("Content-Type", "application/json")
		if status == "starting" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "dependencies": deps})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		pub.Close()
		nc.Close()
		return nil, fmt.Errorf("service: listen %s: %w", cfg.Listen, err)
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	run := &Running{Addr: ln.Addr().String(), Done: make(chan struct{})}
	log.Info("listening", "addr", run.Addr, "nats", cfg.NATSURL, "redis", RedactURL(cfg.RedisURL))
	go func() { _ = hs.Serve(ln) }()

	dctx, stop := context.WithCancel(context.Background())
	derr := make(chan error, 1)
	go func() { derr <- lead(dctx, lease, newDaemon, &state, metrics, log) }()
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
