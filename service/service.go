// Package service builds both daemons from components: the store, the
// event publisher, the embedded NATS server, the risk daemon, the HTTP and
// gRPC listeners, the policy, list and ASN watchers and pprof. Each has a
// config with Validate, a constructor that acquires what it holds, and
// Run(ctx), which serves until ctx ends or the part fails and then
// releases it. One group runs a daemon's components: the first failure
// stops the rest and is the daemon's exit cause; shutdown goes in reverse
// order of start (see docs/design.md). cmd/limiter and cmd/riskd are thin
// mains over Start and StartRiskd, which handle no signals, and tests run
// the whole daemons in-process through them.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
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
	// (JetStream in NATSStoreDir, loopback) and the risk engine in process.
	NATSURL string
	// NATSCA and NATSCreds are the CA file of a TLS NATS server and a
	// JWT + nkey credentials file (7.5); with NATSURL only.
	NATSCA, NATSCreds string
	// NATSPort is the embedded NATS server's port (0: a free port).
	NATSPort int
	// NATSStoreDir is where the embedded NATS server keeps JetStream (the
	// audit record, alerts, reports, decisions), kept across restarts.
	// Default: with RedisURL a directory under the user's cache directory
	// named for the Redis URL, key prefix and stream name; without, a temp
	// dir removed at exit.
	NATSStoreDir string
	// AdminToken enables /v1/admin/* with this bearer token.
	AdminToken string
	// GRPCListen, when set, serves Envoy's rate-limit service
	// (envoy.service.ratelimit.v3.RateLimitService) over gRPC (h2c, or TLS with GRPCTLS)
	// on this address (":0" picks a port); "" serves none.
	GRPCListen string
	// TLS secures Listen (the public listener in proxy mode, else the
	// only one), APITLS the API listener of proxy mode and GRPCTLS
	// GRPCListen (7.5); their certificates are reloaded when the files
	// change. Zero: plaintext.
	TLS, APITLS, GRPCTLS TLSFiles
	// GRPCMaxStreams bounds the calls open at once on one gRPC connection
	// (default 100; more are refused with REFUSED_STREAM, 7.5).
	GRPCMaxStreams int
	// GRPCIdleTimeout closes a gRPC connection that has had no call open
	// for this long (default 5m, 7.5).
	GRPCIdleTimeout time.Duration
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
	// UpstreamTimeout bounds the wait for the upstream's answer in proxy
	// mode (default 60s): past it the client gets 504 UPSTREAM_TIMEOUT.
	UpstreamTimeout time.Duration
	// ProxyIdleTimeout bounds how long a proxied response may go without
	// a byte moving (default 60s); there is no total deadline (7.5).
	ProxyIdleTimeout time.Duration
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
	// StreamReplicas is how many copies a NATS cluster keeps of every
	// stream (default 1; 3 on a three-node cluster, 7.6). riskd's must be
	// the same.
	StreamReplicas int
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
	// NoForwardAuth turns /v1/forward-auth off (it answers 404): a gateway
	// never says when a forwarded request ends, so a policy with a
	// concurrency limit is refused at start and on reload unless forward
	// auth is off (7.4; --no-forward-auth).
	NoForwardAuth bool
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
	// ShutdownTimeout bounds the drain of in-flight requests, on every
	// listener at once; past it they are cut (default 10s).
	ShutdownTimeout time.Duration
	// Logger receives JSON logs (default: JSON on stderr).
	Logger *slog.Logger
	// Getenv reads the environment variables the policy names: the
	// user-signature key and the Play Integrity keys (default os.Getenv).
	Getenv func(string) string
}

// defaults fills the zero fields (the defaults of defaults.go).
func (c *Config) defaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.APIListen == "" && c.Upstream != "" {
		c.APIListen = DefaultAPIListen
	}
	if c.AttestPrefix == "" {
		c.AttestPrefix = DefaultAttestPrefix
	}
	if c.BodyTimeout <= 0 {
		c.BodyTimeout = DefaultBodyTimeout
	}
	if c.UpstreamTimeout <= 0 {
		c.UpstreamTimeout = DefaultUpstreamTimeout
	}
	if c.ProxyIdleTimeout <= 0 {
		c.ProxyIdleTimeout = DefaultProxyIdleTimeout
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	if c.StoreTimeout <= 0 {
		c.StoreTimeout = DefaultStoreTimeout
	}
	if c.WatchInterval <= 0 {
		c.WatchInterval = DefaultWatchInterval
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
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
	if err := c.validateAddrs(); err != nil {
		return err
	}
	if err := c.validateNumbers(); err != nil {
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
	if c.RedisURL != "" {
		if _, err := redisOptions(c.RedisURL, c.RedisCA); err != nil {
			return err
		}
	} else if c.RedisCA != "" {
		return fmt.Errorf("service: redis CA file %s given without a redis URL", c.RedisCA)
	}
	return c.validateTLS()
}

// validateAddrs checks the listeners' addresses, the upstream and the
// attestation prefix, and that the API does not share the public listener
// in proxy mode.
func (c *Config) validateAddrs() error {
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
	if c.Upstream != "" { // without it the API listener is not used (6.1)
		if err := checkAddr("api listen address", c.APIListen); err != nil {
			return err
		}
	}
	if err := checkAddr("grpc listen address", c.GRPCListen); err != nil {
		return err
	}
	if c.AttestPrefix != "" && (len(c.AttestPrefix) < 2 || !strings.HasPrefix(c.AttestPrefix, "/") || !strings.HasSuffix(c.AttestPrefix, "/") ||
		policy.NormalizePath(c.AttestPrefix)+"/" != c.AttestPrefix) {
		return fmt.Errorf("service: attest prefix %q must be a clean path that starts and ends with a slash, such as /v1/attest/", c.AttestPrefix)
	}
	if c.Upstream != "" && c.APIListen != "" && c.APIListen == c.Listen && !strings.HasSuffix(c.Listen, ":0") {
		return fmt.Errorf("service: the API listener (%s) must not be the public listener: the limiter's API must not face the internet", c.APIListen)
	}
	return nil
}

// validateNumbers checks the sizes, counts and durations: none negative,
// the NATS port a TCP port, the stream replicas at most MaxStreamReplicas.
func (c *Config) validateNumbers() error {
	for _, n := range []struct {
		name string
		v    int64
	}{{"nats port", int64(c.NATSPort)}, {"redis lanes", int64(c.RedisLanes)}, {"memory max keys", int64(c.MemoryMaxKeys)},
		{"l1 max entries", int64(c.L1MaxEntries)}, {"decisions max bytes", c.DecisionsMaxBytes},
		{"store timeout", int64(c.StoreTimeout)}, {"grpc max streams", int64(c.GRPCMaxStreams)}, {"grpc idle timeout", int64(c.GRPCIdleTimeout)},
		{"upstream timeout", int64(c.UpstreamTimeout)}, {"proxy idle timeout", int64(c.ProxyIdleTimeout)}, {"l1 ttl", int64(c.L1TTL)}, {"shutdown timeout", int64(c.ShutdownTimeout)}} {
		if n.v < 0 {
			return fmt.Errorf("service: %s %d must not be negative", n.name, n.v)
		}
	}
	if err := checkReplicas(c.StreamReplicas); err != nil {
		return err
	}
	if c.NATSPort > 65535 {
		return fmt.Errorf("service: nats port %d is not a TCP port", c.NATSPort)
	}
	if c.BodyTimeout < 0 || c.StoreTimeout < 0 {
		return errors.New("service: body and store timeouts must not be negative")
	}
	return nil
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
	// Done is closed when the daemon has stopped; Err then holds why: nil
	// after a clean stop, else the part that failed first.
	Done chan struct{}
	Err  error

	reload func() error
}

// Reload rereads the policy file now (cmd/limiter and cmd/riskd call it
// on SIGHUP); a refused file keeps the policy in force and is returned.
// Without a policy file it does nothing.
func (r *Running) Reload() error {
	if r.reload == nil {
		return nil
	}
	return r.reload()
}

// Start starts the limiter and returns once it listens. It stops when ctx
// ends: readiness turns to draining, every listener drains at once
// (in-flight requests finish, up to one ShutdownTimeout for all, and past
// it are cut, with a warning: not an error), then the other parts stop in
// reverse order of start, the store last. A part that fails stops the
// limiter too; Running.Err then names it.
func Start(ctx context.Context, cfg Config) (*Running, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	quietRedis(cfg.Logger)
	g := &group{log: cfg.Logger.With("component", "limiter")}
	l, err := buildLimiter(ctx, cfg, g)
	if err != nil {
		g.abort()
		return nil, err
	}
	g.start(ctx)
	if l.risk != nil {
		select {
		case <-l.risk.ready():
		case <-g.fail:
		case <-ctx.Done():
		case <-time.After(riskReadyTimeout):
			g.log.Warn("risk engine not ready; continuing", "waited", riskReadyTimeout.String())
		}
	}
	l.srv.SetState("ready")
	g.finish(ctx, l.run)
	return l.run, nil
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
// checkReplicas refuses a stream replica count JetStream cannot keep (0 is
// the default, 1).
func checkReplicas(n int) error {
	if n < 0 || n > MaxStreamReplicas {
		return fmt.Errorf("service: stream replicas %d must be between 1 and %d", n, MaxStreamReplicas)
	}
	return nil
}

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
