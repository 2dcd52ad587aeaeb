package service

import (
	"time"

	"github.com/tollgate-dev/tollgate/api"
	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/risk"
	"github.com/tollgate-dev/tollgate/streams"
)

// The daemons' defaults, in one place: Config and RiskdConfig fill their
// zero fields with them, and cmd/limiter and cmd/riskd show them in
// --help.
const (
	// DefaultListen is the limiter's (public) HTTP address.
	DefaultListen = "127.0.0.1:8080"
	// DefaultAPIListen is the limiter's API address in proxy mode.
	DefaultAPIListen = "127.0.0.1:8081"
	// DefaultRiskdListen is riskd's HTTP address (/healthz, /readyz, /metrics).
	DefaultRiskdListen = "127.0.0.1:9090"
	// DefaultKeyPrefix starts every Redis key.
	DefaultKeyPrefix = bucket.DefaultPrefix
	// DefaultSubjectPrefix starts every NATS subject.
	DefaultSubjectPrefix = streams.DefaultPrefix
	// DefaultStreamName starts the JetStream stream names.
	DefaultStreamName = streams.DefaultName
	// DefaultDurable names riskd's durable consumers and its lease.
	DefaultDurable = risk.DefaultDurable
	// DefaultAttestPrefix is where the public listener serves attestation.
	DefaultAttestPrefix = "/v1/attest/"
	// DefaultStreamMaxBytes bounds each JetStream stream (1 GiB).
	DefaultStreamMaxBytes = 1 << 30
	// DefaultStreamReplicas is how many copies of each stream a NATS cluster
	// keeps: one, a single server's.
	DefaultStreamReplicas = 1
	// MaxStreamReplicas is JetStream's own limit on a stream's replicas.
	MaxStreamReplicas = 5
	// DefaultDecisionsMaxAge is how long the decisions stream keeps decisions.
	DefaultDecisionsMaxAge = time.Hour
	// DefaultBodyTimeout bounds a proxied request body's arrival.
	DefaultBodyTimeout = 30 * time.Second
	// DefaultUpstreamTimeout bounds the wait for the upstream's answer.
	DefaultUpstreamTimeout = api.DefaultUpstreamTimeout
	// DefaultProxyIdleTimeout bounds a proxied response's silences.
	DefaultProxyIdleTimeout = api.DefaultProxyIdleTimeout
	// DefaultStoreTimeout bounds each check's store work.
	DefaultStoreTimeout = 50 * time.Millisecond
	// DefaultRedisLanes is the number of Redis round trips in flight at once.
	DefaultRedisLanes = 4
	// DefaultMemoryMaxKeys bounds the memory store's buckets.
	DefaultMemoryMaxKeys = bucket.DefaultMaxKeys
	// DefaultL1TTL is the L1 cache's staleness bound.
	DefaultL1TTL = 250 * time.Millisecond
	// DefaultL1MaxEntries bounds the L1 cache.
	DefaultL1MaxEntries = 100_000
	// DefaultWatchInterval is how often the policy and list files are checked.
	DefaultWatchInterval = 2 * time.Second
	// DefaultASNWatchInterval is how often the ASN database file is checked.
	DefaultASNWatchInterval = time.Minute
	// DefaultShutdownTimeout bounds the drain of in-flight requests.
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultLeaseTTL is riskd's leadership lease TTL.
	DefaultLeaseTTL = 5 * time.Second
	// riskdDrainTimeout bounds the drain of riskd's HTTP listener.
	riskdDrainTimeout = 5 * time.Second
)

// The gRPC listener's bounds on what one connection may hold (7.5).
const (
	// DefaultGRPCMaxStreams bounds the calls open at once on one connection.
	DefaultGRPCMaxStreams = 100
	// DefaultGRPCIdleTimeout closes a connection with no call open this long.
	DefaultGRPCIdleTimeout = 5 * time.Minute
)
