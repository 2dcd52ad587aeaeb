// Package service wires the limiter together: policy, store, engine, HTTP
// API, metrics, signals. cmd/limiter is a thin main over Run, and tests run
// the whole daemon in-process through it.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/api"
	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
)

// Config is the limiter's configuration. Every field has a flag and an
// environment variable in cmd/limiter; the zero value of each is its default.
type Config struct {
	// ConfigPath is the policy file; "" uses the built-in example policy.
	ConfigPath string
	// Listen is the HTTP address (default 127.0.0.1:8080; ":0" picks a port).
	Listen string
	// RedisURL selects the Redis store: "redis://host:port/db", a
	// comma-separated host:port list or "redis+cluster://h1:p1,h2:p2" for
	// Cluster. "" uses the in-process memory store.
	RedisURL string
	// RedisCA is a PEM file of CA certificates that rediss:// servers'
	// certificates must chain to ("" trusts the system roots).
	RedisCA string
	// NATSURL is the NATS server; "" starts an embedded NATS server
	// (JetStream in a temp dir, loopback) and the risk engine in process.
	NATSURL string
	// NATSPort is the embedded NATS server's port (0: a free port).
	NATSPort int
	// AdminToken enables /v1/admin/* with this bearer token.
	AdminToken string
	// GRPCListen, when set, serves Envoy's rate-limit service
	// (envoy.service.ratelimit.v3.RateLimitService) over plaintext gRPC
	// on this address (":0" picks a port); "" serves none.
	GRPCListen string
	// APIToken, when set, is the bearer token /v1/check, /v1/report and
	// /v1/forward-auth require (6.2); "" leaves them open.
	APIToken string
	// APIListen is the address of the limiter's own API (/v1/check,
	// /v1/report, /v1/admin/*, /v1/forward-auth) and /metrics in proxy mode
	// (6.1; default 127.0.0.1:8081; ":0" picks a port). Unused without
	// Upstream: Listen then serves everything.
	APIListen string
	// AttestPrefix is where the public listener serves the attestation
	// endpoints in proxy mode (default "/v1/attest/").
	AttestPrefix string
	// BodyTimeout bounds the arrival of a proxied request's body, from its
	// arrival (default 30s): a body still missing then is answered 408.
	BodyTimeout time.Duration
	// Upstream, when set, turns on reverse-proxy mode: allowed requests
	// are forwarded to this URL.
	Upstream string
	// UpstreamTransport picks the proxy's upstream client: "lean" (default:
	// api.UpstreamTransport, the round trip on the request's goroutine) or
	// "std" (net/http's Transport for everything).
	UpstreamTransport string
	// KeyPrefix starts every Redis key (default "tg:").
	KeyPrefix string
	// SubjectPrefix starts every NATS subject (default "tollgate.").
	SubjectPrefix string
	// StreamName starts the JetStream stream names (default "TOLLGATE").
	StreamName string
	// DecisionsMaxBytes bounds the decisions stream (default 1 GiB; JetStream
	// reserves it on the server).
	DecisionsMaxBytes int64
	// DecisionsMaxAge is how long the decisions stream keeps decisions
	// (default 1h; raise it to replay older traffic with `limiter replay`,
	// see docs/tuning.md). riskd's must be the same.
	DecisionsMaxAge time.Duration
	// EventsMaxBytes bounds the reports-and-alerts stream (default 1 GiB;
	// JetStream reserves it on the server).
	EventsMaxBytes int64
	// StoreTimeout bounds each check's store work from the moment it asks
	// (default 50ms): the wait for a Redis lane, dial, write and read
	// (6.6). Past it the limit's failure mode answers.
	StoreTimeout time.Duration
	// RedisLanes is the number of Redis round trips in flight at once, each
	// carrying a batch of concurrent decisions (default 4).
	RedisLanes int
	// MemoryMaxKeys bounds the memory store's buckets (default 1<<20).
	MemoryMaxKeys int
	// NoL1 turns the local L1 cache in front of Redis off.
	NoL1 bool
	// L1TTL is the L1 cache's staleness bound (default 250ms).
	L1TTL time.Duration
	// L1MaxEntries bounds the L1 cache (default 100,000).
	L1MaxEntries int
	// L1NoMultipliers stops the L1 cache from caching multipliers.
	L1NoMultipliers bool
	// WatchInterval is how often the policy file and its list files are
	// checked for changes (default 2s).
	WatchInterval time.Duration
	// ASNWatchInterval is how often the ASN database file is checked for
	// a new version (default 1m).
	ASNWatchInterval time.Duration
	// PprofListen, when set, serves net/http/pprof on this address (keep it
	// on loopback: profiles reveal internals).
	PprofListen string
	// ShutdownTimeout bounds the drain of in-flight requests (default 10s).
	ShutdownTimeout time.Duration
	// Logger receives JSON logs (default: JSON on stderr).
	Logger *slog.Logger
	// Getenv reads the environment variables the policy names: the
	// user-signature key and the Play Integrity keys (default os.Getenv).
	Getenv func(string) string
}

func (c *Config) defaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if c.APIListen == "" && c.Upstream != "" {
		c.APIListen = "127.0.0.1:8081"
	}
	if c.AttestPrefix == "" {
		c.AttestPrefix = "/v1/attest/"
	}
	if c.BodyTimeout <= 0 {
		c.BodyTimeout = 30 * time.Second
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = "tg:"
	}
	if c.StoreTimeout <= 0 {
		c.StoreTimeout = 50 * time.Millisecond
	}
	if c.WatchInterval <= 0 {
		c.WatchInterval = 2 * time.Second
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if c.Getenv == nil {
		c.Getenv = os.Getenv
	}
}

// Validate checks the configuration's values, without looking at the
// policy or the network: cmd/limiter exits 2 (a usage error) on its errors.
func (c *Config) Validate() error {
	if err := checkAddr("listen address", c.Listen); err != nil {
		return err
	}
	if err := checkAddr("pprof listen address", c.PprofListen); err != nil {
		return err
	}
	if c.Upstream != "" {
		if _, err := upstreamURL(c.Upstream); err != nil {
			return err
		}
	}
	for _, n := range []struct {
		name string
		v    int64
	}{{"nats port", int64(c.NATSPort)}, {"redis lanes", int64(c.RedisLanes)}, {"memory max keys", int64(c.MemoryMaxKeys)},
		{"l1 max entries", int64(c.L1MaxEntries)}, {"decisions max bytes", c.DecisionsMaxBytes},
		{"store timeout", int64(c.StoreTimeout)}, {"l1 ttl", int64(c.L1TTL)}, {"shutdown timeout", int64(c.ShutdownTimeout)}} {
		if n.v < 0 {
			return fmt.Errorf("service: %s %d must not be negative", n.name, n.v)
		}
	}
	if c.NATSPort > 65535 {
		return fmt.Errorf("service: nats port %d is not a TCP port", c.NATSPort)
	}
	if strings.ContainsAny(c.KeyPrefix, "{}") {
		return fmt.Errorf("service: key prefix %q must not contain braces", c.KeyPrefix)
	}
	if c.RedisURL != "" {
		if _, err := redisOptions(c.RedisURL, c.RedisCA); err != nil {
			return err
		}
	} else if c.RedisCA != "" {
		return fmt.Errorf("service: redis CA file %s given without a redis URL", c.RedisCA)
	}
	if c.GRPCListen != "" {
		if _, _, err := net.SplitHostPort(c.GRPCListen); err != nil {
			return fmt.Errorf("service: grpc listen address %q: %w", c.GRPCListen, err)
		}
	}
	switch c.UpstreamTransport {
	case "", "lean", "std":
	default:
		return fmt.Errorf("service: upstream transport %q: want lean or std", c.UpstreamTransport)
	}
	if c.AttestPrefix != "" && (len(c.AttestPrefix) < 2 || !strings.HasPrefix(c.AttestPrefix, "/") || !strings.HasSuffix(c.AttestPrefix, "/") ||
		policy.NormalizePath(c.AttestPrefix)+"/" != c.AttestPrefix) {
		return fmt.Errorf("service: attest prefix %q must be a clean path that starts and ends with a slash, such as /v1/attest/", c.AttestPrefix)
	}
	if c.Upstream != "" && c.APIListen != "" && c.APIListen == c.Listen && !strings.HasSuffix(c.Listen, ":0") {
		return fmt.Errorf("service: the API listener (%s) must not be the public listener: the limiter's API must not face the internet", c.APIListen)
	}
	if c.BodyTimeout < 0 || c.StoreTimeout < 0 {
		return errors.New("service: body and store timeouts must not be negative")
	}
	return nil
}

// redisLog sends go-redis's internal log lines (dial failures during an
// outage, one per attempt) to slog at debug level instead of stderr.
type redisLog struct{ l *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...interface{}) {
	r.l.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}

var redisLogOnce sync.Once

// quietRedis installs redisLog once per process (go-redis's logger is global).
func quietRedis(l *slog.Logger) {
	redisLogOnce.Do(func() { redis.SetLogger(redisLog{l}) })
}

// Running is a started limiter.
type Running struct {
	// Addr is the address the HTTP server listens on (the public
	// listener in proxy mode).
	Addr string
	// GRPCAddr is the address the Envoy rate-limit service listens on
	// ("" when Config.GRPCListen is not set).
	GRPCAddr string
	// APIAddr is the address of the limiter's own API: the API listener
	// in proxy mode, else Addr.
	APIAddr string
	// NATSURL is the NATS server in use (the embedded one's, when embedded).
	NATSURL string
	// Done is closed when the limiter has stopped; Err then holds why.
	Done chan struct{}
	Err  error
}

// Start starts the limiter and returns once it listens. It stops when ctx
// ends: readiness turns to draining, in-flight requests finish (up to
// ShutdownTimeout), then the store closes.
func Start(ctx context.Context, cfg Config) (*Running, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "limiter")
	quietRedis(cfg.Logger)

	holder, err := loadPolicy(cfg.ConfigPath, cfg.Logger)
	if err != nil {
		return nil, err
	}
	if err := checkUserKey(cfg, holder.Current()); err != nil {
		return nil, err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_policy_reloads_total",
		Help: "Policy reload attempts by result (ok, error); a refused file keeps the running policy.",
	}, []string{"result"})
	reg.MustRegister(reloads)
	reloads.WithLabelValues("ok") // export both series from the start, for alerting
	reloads.WithLabelValues("error")
	listReloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_list_reloads_total",
		Help: "Reloads of changed allow/deny list files by list and result (ok, error); a refused file keeps the list's old entries.",
	}, []string{"list", "result"})
	reg.MustRegister(listReloads)
	reg.MustRegister(listEntries{holder: holder, desc: prometheus.NewDesc("tollgate_list_entries",
		"Entries in force per allow/deny list of the running policy.", []string{"list"}, nil)})
	holder.OnListReload = func(l *policy.List, err error) {
		result := "ok"
		if err != nil {
			result = "error" // the holder logged it with FILE:LINE
		}
		listReloads.WithLabelValues(l.Name, result).Inc()
	}
	rep := newReputationState(cfg.Logger.With("component", "reputation"), reg, cfg.ASNWatchInterval)
	if err := rep.apply(holder.Current()); err != nil {
		return nil, err
	}
	var att *attestState // set below, before the policy can reload
	holder.OnReload = func(np *policy.Policy, err error) {
		// The Holder logs each attempt once (file, routes, limits or the
		// error); this counts it.
		if err != nil {
			reloads.WithLabelValues("error").Inc()
			return
		}
		reloads.WithLabelValues("ok").Inc()
		// The new limits are in force; a reputation database or attestation
		// key it names that cannot be read keeps the previous one serving.
		if err := rep.apply(np); err != nil {
			log.Error("policy reloaded, but its ASN database could not be loaded; the previous reputation rules stay", "err", err.Error())
		}
		if att != nil {
			if err := att.apply(np); err != nil {
				log.Error("policy reloaded, but its attestation settings could not be loaded; the previous ones stay", "err", err.Error())
			}
		}
	}

	metrics := engine.NewMetrics(reg)
	breaker := engine.NewBreaker(engine.BreakerOptions{}, nil, func(s engine.BreakerState) {
		metrics.Circuit.Set(float64(s))
		log.Warn("store circuit breaker", "state", s.String())
	})

	var (
		store   bucket.Store
		rclient redis.UniversalClient
		closers []func()
	)
	if cfg.RedisURL == "" {
		ms := bucket.NewMemoryStore(bucket.MemoryOptions{MaxKeys: cfg.MemoryMaxKeys, Prefix: cfg.KeyPrefix})
		store = ms
		sweepCtx, stop := context.WithCancel(context.Background())
		closers = append(closers, stop)
		go func() {
			t := time.NewTicker(10 * time.Second)
			defer t.Stop()
			for {
				select {
				case now := <-t.C:
					ms.Sweep(now)
				case <-sweepCtx.Done():
					return
				}
			}
		}()
	} else {
		opts, _ := redisOptions(cfg.RedisURL, cfg.RedisCA) // checked by Validate
		// Every check answers within the store timeout (6.6): the client
		// honours the decision's deadline, and no dial, read or write
		// outlasts it.
		opts.DialTimeout = cfg.StoreTimeout
		opts.ReadTimeout = cfg.StoreTimeout
		opts.WriteTimeout = cfg.StoreTimeout
		opts.ContextTimeoutEnabled = true
		opts.MaxRetries = -1
		rclient = redis.NewUniversalClient(opts)
		dialRedisOnce(ctx, log, rclient, cfg.RedisURL, "the limiter serves as each limit's failure mode says until it answers")
		rs := bucket.NewRedisStore(rclient, bucket.RedisOptions{Timeout: cfg.StoreTimeout, Lanes: cfg.RedisLanes, Cluster: opts.IsClusterMode, Prefix: cfg.KeyPrefix})
		store = rs
		closers = append(closers, func() { _ = rs.Close(); _ = rclient.Close() })
	}
	closers = append(closers, rep.close)
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}

	ev, err := startEvents(ctx, cfg, log, reg, store, rclient, holder)
	if err != nil {
		closeAll()
		return nil, err
	}
	closers = append(closers, ev.close)

	var l1 *engine.L1
	if cfg.RedisURL != "" && !cfg.NoL1 {
		l1 = engine.NewL1(engine.L1Options{MaxEntries: cfg.L1MaxEntries, TTL: cfg.L1TTL, NoMultipliers: cfg.L1NoMultipliers})
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_l1_entries",
			Help: "Entries held by the local L1 cache (bounded by --l1-max-entries)."}, func() float64 { return float64(l1.Len()) }))
	}
	eng, err := engine.New(engine.Options{
		Store: store, Policy: holder.Current, Prefix: cfg.KeyPrefix, Metrics: metrics, Breaker: breaker, L1: l1,
		Reputation: rep.Current,
	})
	if err != nil {
		closeAll()
		return nil, err
	}
	att = newAttestState(cfg.Logger.With("component", "attestation"), store, rclient, cfg.KeyPrefix)
	att.getenv = cfg.Getenv
	if err := att.apply(holder.Current()); err != nil {
		closeAll()
		return nil, err
	}
	srv, err := api.New(api.Options{
		Engine:       eng,
		AdminToken:   cfg.AdminToken,
		Store:        l1.Wrap(store),
		Getenv:       cfg.Getenv,
		APIToken:     cfg.APIToken,
		AttestPrefix: cfg.AttestPrefix,
		BodyTimeout:  cfg.BodyTimeout,
		Logger:       log,
		Gatherer:     reg,
		Events:       ev.publisher,
		Reporter:     ev.publisher,
		Audit:        ev.publisher,
		Offenders:    ev.offenders,
		Attestation:  att.view,
		DeviceTokens: att.Tokens,
		Dependencies: func(ctx context.Context) map[string]string {
			deps := map[string]string{"redis": "disabled", "nats": ev.state()}
			if rclient != nil {
				deps["redis"] = "up"
				if err := rclient.Ping(ctx).Err(); err != nil {
					deps["redis"] = "down"
				}
			}
			return deps
		},
	})
	if err != nil {
		closeAll()
		return nil, err
	}

	srv.Handle("/v1/attest/", srv.Guard(att))

	if cfg.Upstream != "" {
		u, _ := upstreamURL(cfg.Upstream) // checked by Validate
		forged := prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_proxy_forged_user_total",
			Help: "Proxied requests whose user header failed its signature (treated as unauthenticated)."})
		upErrs := prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_proxy_upstream_errors_total",
			Help: "Proxied requests the upstream could not answer (502/504)."})
		reg.MustRegister(forged, upErrs)
		po := api.ProxyOptions{Upstream: u, OnForgedUser: forged.Inc, OnUpstreamError: upErrs.Inc, Getenv: cfg.Getenv}
		if cfg.UpstreamTransport == "std" {
			po.Transport = api.StdUpstreamTransport() // Validate allowed only lean (the default) or std
		}
		if err := srv.EnableProxy(po); err != nil {
			closeAll()
			return nil, err
		}
	}

	ls, err := listen(cfg, srv, log)
	if err != nil {
		closeAll()
		return nil, err
	}
	addr, apiAddr := ls[0].addr(), ls[len(ls)-1].addr()
	store_ := "memory"
	if cfg.RedisURL != "" {
		store_ = "redis " + RedactURL(cfg.RedisURL)
	}
	policyName := cfg.ConfigPath
	if policyName == "" {
		policyName = "built-in example"
	}
	log.Info("listening", "addr", addr, "api_addr", apiAddr, "store", store_, "policy", policyName, "nats", RedactURL(ev.url), "upstream", RedactURL(cfg.Upstream),
		"try", fmt.Sprintf(`curl -s -X POST http://%s/v1/check -d '{"endpoint":"POST /auth/login","ip":"198.51.100.7","account":"alice"}'`, apiAddr))

	if cfg.PprofListen != "" {
		pm := http.NewServeMux()
		pm.HandleFunc("/debug/pprof/", pprof.Index)
		pm.HandleFunc("/debug/pprof/profile", pprof.Profile)
		pm.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		pm.HandleFunc("/debug/pprof/trace", pprof.Trace)
		ps := &http.Server{Addr: cfg.PprofListen, Handler: pm, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = ps.ListenAndServe() }()
		closers = append(closers, func() { _ = ps.Close() })
		log.Info("pprof listening", "addr", cfg.PprofListen)
	}
	run := &Running{Addr: addr, APIAddr: apiAddr, NATSURL: ev.url, Done: make(chan struct{})}
	serveErr := make(chan error, len(ls)+1)
	var gs *grpcService
	if cfg.GRPCListen != "" {
		if gs, err = startGRPC(cfg, log, reg, srv, holder.Current, serveErr); err != nil {
			for _, l := range ls {
				_ = l.ln.Close()
			}
			closeAll()
			return nil, err
		}
		run.GRPCAddr = gs.addr
	}
	for _, l := range ls {
		go func() { serveErr <- l.hs.Serve(l.ln) }()
	}
	srv.SetState("ready")

	watchCtx, stopWatch := context.WithCancel(context.Background())
	if cfg.ConfigPath != "" {
		go holder.Watch(watchCtx, cfg.WatchInterval)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)

	go func() {
		defer close(run.Done)
		defer closeAll()
		if gs != nil {
			defer gs.server.Stop() // after a serve error too (a no-op once drained)
		}
		defer stopWatch()
		defer signal.Stop(hup)
		for {
			select {
			case <-hup:
				if cfg.ConfigPath != "" {
					_ = holder.Reload()
				}
				continue
			case err := <-serveErr:
				run.Err = fmt.Errorf("service: serve: %w", err)
				return
			case <-ctx.Done():
			}
			break
		}
		log.Info("draining")
		srv.SetState("draining")
		sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		if gs != nil {
			gs.stop(sctx)
		}
		var wg sync.WaitGroup
		errs := make([]error, len(ls))
		for i, l := range ls {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = l.hs.Shutdown(sctx) }()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			run.Err = fmt.Errorf("service: shutdown: %w", err)
		}
		for range ls {
			if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) && run.Err == nil {
				run.Err = fmt.Errorf("service: serve: %w", err)
			}
		}
		srv.WaitReports()
		log.Info("stopped")
	}()
	return run, nil
}

// listener is one HTTP listener of the limiter.
type listener struct {
	ln net.Listener
	hs *http.Server
}

func (l listener) addr() string { return l.ln.Addr().String() }

// listen opens the limiter's listeners (6.1): without an upstream, one on
// cfg.Listen serving everything; in proxy mode the public one on
// cfg.Listen (health, attestation, everything else forwarded) first and
// the API one on cfg.APIListen (the limiter's API and /metrics) last.
func listen(cfg Config, srv *api.Server, log *slog.Logger) ([]listener, error) {
	type spec struct {
		addr    string
		handler http.Handler
		public  bool
	}
	specs := []spec{{cfg.Listen, srv, false}}
	if cfg.Upstream != "" {
		specs = []spec{{cfg.Listen, srv.Public(), true}, {cfg.APIListen, srv, false}}
	}
	var ls []listener
	for _, sp := range specs {
		ln, err := net.Listen("tcp", sp.addr)
		if err != nil {
			for _, l := range ls {
				_ = l.ln.Close()
			}
			return nil, fmt.Errorf("service: listen %s: %w", sp.addr, err)
		}
		hs := &http.Server{
			Handler:           sp.handler,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       120 * time.Second,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		}
		if sp.public {
			// The body's deadline is set per request (BodyTimeout, from
			// arrival); the answer may follow a body that took that long.
			hs.ReadTimeout = 0
			hs.WriteTimeout = max(30*time.Second, cfg.BodyTimeout+30*time.Second)
		}
		ls = append(ls, listener{ln: ln, hs: hs})
	}
	return ls, nil
}

// loadPolicy loads the policy file (or the built-in policy for "") into
// a Holder that reloads it.
func loadPolicy(path string, logger *slog.Logger) (*policy.Holder, error) {
	var p *policy.Policy
	if path != "" {
		var err error
		if p, err = policy.Load(path); err != nil {
			return nil, err // "FILE:LINE: ..." or "policy: read config: ...": no second prefix
		}
	}
	return policy.NewHolder(path, p, logger.With("component", "policy")), nil
}

// upstreamURL parses the --upstream value: an http(s) URL with a host.
func upstreamURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("service: upstream %q is not an http(s) URL", RedactURL(s))
	}
	return u, nil
}

// checkAddr checks a listen address: "" (unset), or host:port with a
// numeric port (":0" picks a free one).
func checkAddr(what, addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return fmt.Errorf("service: %s %q: want HOST:PORT (%v)", what, addr, err)
	}
	return nil
}

// listEntries exports tollgate_list_entries{list}: the entries in force of
// each list of the running policy.
type listEntries struct {
	holder *policy.Holder
	desc   *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c listEntries) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c listEntries) Collect(ch chan<- prometheus.Metric) {
	p := c.holder.Current()
	if p == nil {
		return
	}
	for _, l := range p.Lists {
		if s := l.Set(); s != nil {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(s.Len()), l.Name)
		}
	}
}
