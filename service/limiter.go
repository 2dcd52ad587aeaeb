package service

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/api"
	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/signals"
	"github.com/tollgate-dev/tollgate/streams"
)

// limiter is the limiter being built: its parts, shared by the steps of
// buildLimiter.
type limiter struct {
	cfg    Config
	log    *slog.Logger
	g      *group
	reg    *prometheus.Registry
	holder *policy.Holder
	rep    *reputationState
	store  *storeComponent
	l1     *engine.L1 // the L1 cache in front of Redis (nil: none)
	events *eventsComponent
	risk   *riskComponent // the in-process risk daemon (nil with --nats)
	att    *attestState
	srv    *api.Server
	run    *Running
}

// buildLimiter adds the limiter's components to g, in order of start: the
// ASN watcher, the store, the embedded NATS server (one process), the
// event publisher, the risk daemon (one process), the policy and list
// watchers, pprof, the listeners (the API one, the public one in proxy
// mode and the gRPC one, a parallel: they drain together, under one
// --shutdown-timeout) and the readiness flag. They stop in the reverse
// order: readiness turns to draining first, then the listeners drain,
// and only then do the publisher flush and the store close (last but
// one), so a request in flight still decides and publishes.
func buildLimiter(ctx context.Context, cfg Config, g *group) (*limiter, error) {
	l := &limiter{cfg: cfg, log: g.log, g: g, reg: newRegistry(), run: &Running{Done: make(chan struct{})}}
	var err error
	if l.holder, err = loadPolicy(cfg.ConfigPath, cfg.Logger); err != nil {
		return nil, err
	}
	if err := checkUserKey(cfg, l.holder.Current()); err != nil {
		return nil, err
	}
	if err := checkAlertingAtStart(l.holder, cfg.Getenv); err != nil {
		return nil, err
	}
	if err := checkConcurrency(cfg, l.holder.Current()); err != nil {
		return nil, err
	}
	// A reload passes the checks a start runs, or it is refused whole:
	// before, it ran only the concurrency and alerting ones, and a policy
	// with an empty user-signature key or missing Play Integrity keys went
	// in force half-applied (TestReloadRefusesWhatStartRefuses).
	l.holder.Check = func(p *policy.Policy) error {
		if p == nil {
			return nil
		}
		if err := checkPolicy(cfg, p); err != nil {
			return err
		}
		return checkASNDatabase(p, l.rep.inUse())
	}
	l.rep = newReputationState(cfg.Logger.With("component", "reputation"), l.reg, cfg.ASNWatchInterval)
	if err := l.rep.apply(l.holder.Current()); err != nil {
		return nil, err
	}
	g.add("asn watcher", l.rep)
	if l.store, err = newStore(ctx, l.storeConfig()); err != nil {
		return nil, err
	}
	g.add("store", l.store)
	if m := l.store.memory; m != nil {
		l.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_memory_leases",
			Help: "Concurrency leases the memory store holds (bounded: a quarter of --memory-max-keys)."}, func() float64 { return float64(m.Leases()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tollgate_memory_leases_refused_total",
				Help: "Requests a concurrency limit denied because the memory store held its bound of leases."}, func() float64 { return float64(m.LeasesRefused()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_memory_buckets",
				Help: "Buckets the memory store holds (bounded by --memory-max-keys)."}, func() float64 { return float64(m.Len()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tollgate_memory_evictions_total",
				Help: "Buckets the memory store evicted for room before they were full again: keys that got back tokens they had spent (raise --memory-max-keys)."}, func() float64 { return float64(m.Evicted()) }))
	}
	l.newL1()
	offenders, err := l.addEvents(ctx)
	if err != nil {
		return nil, err
	}
	l.att = newAttestState(cfg.Logger.With("component", "attestation"), l.store.client, cfg.KeyPrefix)
	l.att.getenv = cfg.Getenv
	l.att.count = countAttestations(l.reg)
	if err := l.att.apply(l.holder.Current()); err != nil {
		return nil, err
	}
	l.watchReloads()
	if l.srv, err = l.server(offenders); err != nil {
		return nil, err
	}
	if err := addWatchers(g, watchConfig{Holder: l.holder, Path: cfg.ConfigPath, Interval: cfg.WatchInterval}); err != nil {
		return nil, err
	}
	if err := l.addListeners(); err != nil {
		return nil, err
	}
	g.add("readiness", componentFunc(func(ctx context.Context) error {
		<-ctx.Done()
		l.log.Info("draining")
		l.srv.SetState("draining")
		return nil
	}))
	return l, nil
}

// storeConfig is the limiter's store: every call bounded by the store
// timeout (6.6).
func (l *limiter) storeConfig() storeConfig {
	c := l.cfg
	return storeConfig{RedisURL: c.RedisURL, RedisCA: c.RedisCA, Prefix: c.KeyPrefix, Timeout: c.StoreTimeout, Bounded: true, Lanes: c.RedisLanes,
		MemoryMaxKeys: c.MemoryMaxKeys, Logger: l.log, Consequence: "the limiter serves as each limit's failure mode says until it answers"}
}

// streams is the streams' configuration of the limiter's flags.
func (c *Config) streams() streams.Config {
	return streams.Config{Prefix: c.SubjectPrefix, Name: c.StreamName, DecisionsMaxBytes: c.DecisionsMaxBytes,
		DecisionsMaxAge: c.DecisionsMaxAge, EventsMaxBytes: c.EventsMaxBytes, Replicas: c.StreamReplicas}
}

// addEvents adds the NATS side: with --nats, the event publisher (riskd
// runs elsewhere and shares offenders through Redis); without, the
// embedded NATS server, the publisher and the risk daemon, built as
// cmd/riskd builds it but without a lease. It returns where the admin
// API reads offenders (nil: nowhere).
func (l *limiter) addEvents(ctx context.Context) (func(context.Context) ([]signals.Offender, error), error) {
	cfg := l.cfg
	dropped := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tollgate_events_dropped_total",
		Help: "Decision events dropped instead of published (queue full, NATS down, publish failed).",
	})
	l.reg.MustRegister(dropped)
	ec := eventsConfig{URL: cfg.NATSURL, Auth: streams.Auth{CA: cfg.NATSCA, Creds: cfg.NATSCreds}, Client: "tollgate-limiter", Streams: cfg.streams(), OnDrop: func(n int) { dropped.Add(float64(n)) },
		Ensure: true, Dial: cfg.NATSURL != "", Consequence: "decisions and reports are dropped (and counted) until it answers", Logger: l.log}
	if cfg.NATSURL == "" {
		en, err := newEmbeddedNATS(natsServerConfig{Port: cfg.NATSPort, Dir: natsStoreDir(cfg), Logger: l.log})
		if err != nil {
			return nil, err
		}
		l.g.add("nats server", en)
		ec.URL = en.srv.URL
	}
	ev, err := newEvents(ctx, ec)
	if err != nil {
		return nil, err
	}
	l.g.add("events", ev)
	l.events, l.run.NATSURL = ev, ev.url
	if cfg.NATSURL != "" {
		if l.store.client == nil {
			return nil, nil
		}
		return redisOffenders(l.store.client, cfg.KeyPrefix), nil
	}
	scanner, _ := l.store.store.(bucket.TrustScanner) // beneath the L1 cache's wrapper
	l.risk, err = newRisk(riskConfig{Publisher: ev.pub, Store: l.l1.Wrap(l.store.store), TrustScanner: scanner, Policy: l.holder.Current, Redis: l.store.client,
		KeyPrefix: cfg.KeyPrefix, Streams: cfg.streams(), Registerer: l.reg, Logger: cfg.Logger.With("component", "riskd"), Getenv: cfg.Getenv})
	if err != nil {
		return nil, err
	}
	l.g.add("risk daemon", l.risk)
	return l.risk.offenders, nil
}

// watchReloads counts policy and list reloads and applies a reloaded
// policy's reputation and attestation settings.
func (l *limiter) watchReloads() {
	countReloads(l.reg, l.holder, func(np *policy.Policy) {
		// The new limits are in force; a reputation database or attestation
		// key it names that cannot be read keeps the previous one serving.
		if err := l.rep.apply(np); err != nil {
			l.log.Error("policy reloaded, but its ASN database could not be loaded; the previous reputation rules stay", "err", err.Error())
		}
		if err := l.att.apply(np); err != nil {
			l.log.Error("policy reloaded, but its attestation settings could not be loaded; the previous ones stay", "err", err.Error())
		}
	})
	if l.cfg.ConfigPath != "" {
		l.run.reload = l.holder.Reload
	}
}

// countReloads registers on reg the reload counters of both daemons,
// tollgate_policy_reloads_total{result} and
// tollgate_list_reloads_total{list,result}, and the gauge
// tollgate_list_entries{list}, and counts h's reloads in them; applied
// (when set) runs after each policy reload that took effect.
func countReloads(reg prometheus.Registerer, h *policy.Holder, applied func(*policy.Policy)) {
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_policy_reloads_total",
		Help: "Policy reload attempts by result (ok, error); a refused file keeps the running policy.",
	}, []string{"result"})
	reloads.WithLabelValues("ok") // export both series from the start, for alerting
	reloads.WithLabelValues("error")
	listReloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_list_reloads_total",
		Help: "Reloads of changed allow/deny list files by list and result (ok, error); a refused file keeps the list's old entries.",
	}, []string{"list", "result"})
	reg.MustRegister(reloads, listReloads, listEntries{holder: h, desc: prometheus.NewDesc("tollgate_list_entries",
		"Entries in force per allow/deny list of the running policy.", []string{"list"}, nil)})
	h.OnListReload = func(pl *policy.List, err error) {
		result := "ok"
		if err != nil {
			result = "error" // the holder logged it with FILE:LINE
		}
		listReloads.WithLabelValues(pl.Name, result).Inc()
	}
	h.OnReload = func(np *policy.Policy, err error) {
		// The Holder logs each attempt once (file, routes, limits or the
		// error); this counts it.
		if err != nil {
			reloads.WithLabelValues("error").Inc()
			return
		}
		reloads.WithLabelValues("ok").Inc()
		if applied != nil {
			applied(np)
		}
	}
}

// newL1 builds the L1 cache in front of Redis unless it is off. What
// changes the store through this limiter (the admin API, the in-process
// risk engine) goes through l1.Wrap, so the cache forgets it at once.
func (l *limiter) newL1() {
	cfg := l.cfg
	if cfg.RedisURL == "" || cfg.NoL1 {
		return
	}
	l1 := engine.NewL1(engine.L1Options{MaxEntries: cfg.L1MaxEntries, TTL: cfg.L1TTL, NoMultipliers: cfg.L1NoMultipliers})
	l.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_l1_entries",
		Help: "Entries held by the local L1 cache (bounded by --l1-max-entries)."}, func() float64 { return float64(l1.Len()) }))
	l.l1 = l1
}

// engine builds the decision engine over the store and the L1 cache.
func (l *limiter) engine() (*engine.Engine, error) {
	metrics := engine.NewMetrics(l.reg)
	breaker := engine.NewBreaker(engine.BreakerOptions{}, nil, func(s engine.BreakerState) {
		metrics.Circuit.Set(float64(s))
		l.log.Warn("store circuit breaker", "state", s.String())
	})
	return engine.New(engine.Options{
		Store: l.store.store, Policy: l.holder.Current, Prefix: l.cfg.KeyPrefix, Metrics: metrics, Breaker: breaker, L1: l.l1,
		Reputation: l.rep.Current,
	})
}

// server builds the HTTP API (and the reverse proxy in proxy mode).
func (l *limiter) server(offenders func(context.Context) ([]signals.Offender, error)) (*api.Server, error) {
	cfg := l.cfg
	eng, err := l.engine()
	if err != nil {
		return nil, err
	}
	pub := l.events.pub
	reports := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_reports_total",
		Help: "Reports accepted for publishing (/v1/report 202, proxy login outcomes) by type (built-in, a velocity rule's event, or other) and source (api, proxy).",
	}, []string{"type", "source"})
	l.reg.MustRegister(reports)
	srv, err := api.New(api.Options{Reports: reports,
		Engine: eng, AdminToken: cfg.AdminToken, Store: l.l1.Wrap(l.store.store), Getenv: cfg.Getenv, APIToken: cfg.APIToken, AttestPrefix: cfg.AttestPrefix,
		BodyTimeout: cfg.BodyTimeout, Logger: l.log, Gatherer: l.reg, NoForwardAuth: cfg.NoForwardAuth,
		Events: pub, Reporter: pub, Audit: pub, Trail: streams.NewTrail(pub.JetStream(), cfg.streams()), Offenders: offenders,
		Attestation: l.att.view, ForgetAttestation: l.att.forget, DeviceTokens: l.att.Tokens,
		Dependencies: func(ctx context.Context) map[string]string {
			redis, _ := l.store.ping(ctx)
			return map[string]string{"redis": redis, "nats": l.events.state()}
		},
	})
	if err != nil {
		return nil, err
	}
	srv.Handle("/v1/attest/", srv.Guard(l.att))
	if err := l.addConsole(srv); err != nil {
		return nil, err
	}
	if cfg.Upstream == "" {
		return srv, nil
	}
	u, err := upstreamURL(cfg.Upstream)
	if err != nil {
		return nil, err
	}
	forged := prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_proxy_forged_user_total",
		Help: "Proxied requests whose user header failed its signature (treated as unauthenticated)."})
	upErrs := prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_proxy_upstream_errors_total",
		Help: "Proxied requests the upstream could not answer (502/504)."})
	l.reg.MustRegister(forged, upErrs)
	po := api.ProxyOptions{Upstream: u, OnForgedUser: forged.Inc, OnUpstreamError: upErrs.Inc, Getenv: cfg.Getenv,
		UpstreamTimeout: cfg.UpstreamTimeout, IdleTimeout: cfg.ProxyIdleTimeout}
	if err := srv.EnableProxy(po); err != nil {
		return nil, err
	}
	return srv, nil
}

// addListeners binds and adds pprof, then the listeners as one parallel
// component: the HTTP ones (6.1: without an upstream one on Listen
// serving everything; in proxy mode the API one on APIListen and the
// public one on Listen) and the gRPC one. Each drains for up to
// --shutdown-timeout, all at once: before, each drained after the one
// added after it, and a stop took up to three timeouts.
func (l *limiter) addListeners() error {
	cfg := l.cfg
	if cfg.PprofListen != "" {
		pp, err := newHTTP(httpConfig{Addr: cfg.PprofListen, Server: pprofServer()})
		if err != nil {
			return err
		}
		l.g.add("pprof", pp)
		l.log.Info("pprof listening", "addr", pp.addr())
	}
	apiAddr := cfg.Listen
	if cfg.Upstream != "" {
		apiAddr = cfg.APIListen
	}
	apiTLS, pubTLS, grpcTLS, err := l.tlsSources()
	if err != nil {
		return err
	}
	ls := &parallel{} // added first: a failed bind below releases what was bound (group.abort)
	l.g.add("listeners", ls)
	api, err := newHTTP(httpConfig{Addr: apiAddr, Server: apiServer(l.srv, false, l.log), Drain: cfg.ShutdownTimeout, TLS: apiTLS, Logger: l.log})
	if err != nil {
		return err
	}
	ls.add("http", api)
	l.run.Addr, l.run.APIAddr = api.addr(), api.addr()
	if cfg.Upstream != "" {
		pub, err := newHTTP(httpConfig{Addr: cfg.Listen, Server: apiServer(l.srv.Public(), true, l.log),
			Drain: cfg.ShutdownTimeout, AfterDrain: func() { l.srv.WaitReports(); l.srv.CloseUpstream() }, TLS: pubTLS, Logger: l.log})
		if err != nil {
			return err
		}
		ls.add("public http", pub)
		l.run.Addr = pub.addr()
	}
	if cfg.GRPCListen != "" {
		gs, err := newGRPC(grpcConfig{Addr: cfg.GRPCListen, Decider: l.srv, Policy: l.holder.Current, Registerer: l.reg, Logger: l.log,
			Drain: cfg.ShutdownTimeout, MaxStreams: cfg.GRPCMaxStreams, IdleTimeout: cfg.GRPCIdleTimeout, TLS: grpcTLS})
		if err != nil {
			return err
		}
		ls.add("grpc", gs)
		l.run.GRPCAddr = gs.addr()
	}
	l.logListening()
	return nil
}

// logListening logs where the limiter listens, with a curl to try.
func (l *limiter) logListening() {
	cfg := l.cfg
	store := "memory"
	if cfg.RedisURL != "" {
		store = "redis " + RedactURL(cfg.RedisURL)
	}
	policyName := cfg.ConfigPath
	if policyName == "" {
		policyName = "built-in example"
	}
	l.log.Info("listening", "addr", l.run.Addr, "api_addr", l.run.APIAddr, "store", store, "policy", policyName,
		"nats", streams.RedactURL(l.run.NATSURL), "upstream", RedactURL(cfg.Upstream),
		"try", fmt.Sprintf(`curl -s -X POST http://%s/v1/check -d '{"endpoint":"POST /auth/login","ip":"198.51.100.7","account":"alice"}'`, l.run.APIAddr))
}
