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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
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
	// Durable names riskd's durable consumers (default "riskd").
	Durable string
	// Logger (default JSON on stderr).
	Logger *slog.Logger
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
	if cfg.RedisURL == "" || cfg.NATSURL == "" {
		return nil, errors.New("service: riskd needs --redis and --nats")
	}
	log := cfg.Logger.With("component", "riskd")
	var p *policy.Policy
	if cfg.ConfigPath != "" {
		var err error
		if p, err = policy.Load(cfg.ConfigPath); err != nil {
			return nil, fmt.Errorf("service: policy: %w", err)
		}
	}
	holder := policy.NewHolder(cfg.ConfigPath, p, log.With("component", "policy"))

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
	scfg := streams.Config{Prefix: cfg.SubjectPrefix, Name: cfg.StreamName}
	pub, err := streams.NewPublisher(nc, streams.PublisherOptions{Config: scfg})
	if err != nil {
		nc.Close()
		return nil, err
	}
	d, err := risk.New(risk.Options{
		Publisher: pub, Store: store, Policy: holder.Current, Prefix: cfg.KeyPrefix, Streams: scfg, Durable: cfg.Durable,
		Metrics: risk.NewMetrics(reg), Logger: log,
		OffenderSink: func(ctx context.Context, list []signals.Offender) error {
			b, err := json.Marshal(list)
			if err != nil {
				return err
			}
			return rc.Set(ctx, offendersKey(cfg.KeyPrefix), b, 2*time.Minute).Err()
		},
	})
	if err != nil {
		pub.Close()
		nc.Close()
		return nil, err
	}

	mux := http.NewServeMux()
	ready := func() bool {
		select {
		case <-d.Ready():
			return true
		default:
			return false
		}
	}
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
		status := "ready"
		if !ready() {
			status = "starting"
		}
		w.Header().Set("Content-Type", "application/json")
		if status != "ready" {
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
	go func() { derr <- d.Run(dctx) }()
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
