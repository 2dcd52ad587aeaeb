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
	DefaultRedisLanes = 2
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

// The HTTP listeners' bounds on one connection (net/http.Server fields).
// They are not flags: they bound what a slow or hostile client can hold,
// and no legitimate caller comes near them.
const (
	// httpReadHeaderTimeout bounds a request's headers: a gateway sends
	// them in one packet, so a client still sending after 5s is stalling
	// (slowloris) and is dropped. Every listener, pprof's and riskd's too.
	httpReadHeaderTimeout = 5 * time.Second
	// httpReadTimeout and httpWriteTimeout bound a whole request and
	// answer on the API listener, whose bodies are a few hundred bytes;
	// the public listener of proxy mode sets its deadlines per request
	// instead (BodyTimeout, the proxy's idle timeout).
	httpReadTimeout  = 30 * time.Second
	httpWriteTimeout = 30 * time.Second
	// httpIdleTimeout keeps a gateway's keep-alive connection for reuse
	// between bursts; it is longer than load balancers' usual 60s, so the
	// balancer, not the limiter, closes an idle connection first.
	httpIdleTimeout = 120 * time.Second
	// httpMaxHeaderBytes bounds a request's headers (net/http's default is
	// 1 MiB): a check's identity headers and a bearer token fit many times.
	httpMaxHeaderBytes = 64 << 10
)

// The gRPC listener's fixed options (7.5; the flags are above).
const (
	// grpcMaxRecvMsgSize bounds one call's message: a RateLimitRequest of
	// a few descriptors is under 1 KiB, so 64 KiB refuses abuse, not use.
	grpcMaxRecvMsgSize = 64 << 10
	// grpcMaxHeaderListSize bounds one call's header list, decoded (HTTP/2
	// counts 32 bytes more a field): Envoy's calls carry a few hundred
	// bytes of headers (tracing ones included), so 16 KiB refuses abuse.
	grpcMaxHeaderListSize = 16 << 10
	// grpcStreamWorkers is how many goroutines grpc-go keeps to run calls
	// (grpc.NumStreamWorkers): a call runs on a worker whose stack has
	// already grown instead of a new goroutine's; when all are busy grpc-go
	// starts a goroutine for the call as without workers, so it bounds
	// nothing and refuses nothing.
	grpcStreamWorkers = 64
	// grpcKeepaliveMinTime is the shortest ping interval a client may use,
	// with or without a call open (Envoy pings idle connections): a client
	// pinging faster is flooding, and grpc-go ends its connection.
	grpcKeepaliveMinTime = 5 * time.Second
	// grpcKeepaliveTime and grpcKeepaliveTimeout: the server pings a
	// connection idle for a minute and closes it when no answer comes in
	// 20s, so a gateway that vanished without a FIN frees its streams.
	grpcKeepaliveTime    = time.Minute
	grpcKeepaliveTimeout = 20 * time.Second
	// grpcAgeGrace is how long a connection recycled at its age
	// (--grpc-idle-timeout) may finish its calls before it is closed:
	// an RLS call takes milliseconds, so only stuck calls are cut.
	grpcAgeGrace = 30 * time.Second
)

// The daemons' internal waits and intervals.
const (
	// startDialTimeout bounds the one dial of Redis and of NATS at start:
	// long enough for a loopback or LAN dial, short enough that a daemon
	// whose dependency is down starts (not ready) without stalling.
	startDialTimeout = 2 * time.Second
	// streamsSetupTimeout bounds creating or updating the JetStream
	// streams at start, a few round trips to the NATS cluster's leader.
	streamsSetupTimeout = 5 * time.Second
	// riskReadyTimeout is how long the one-process limiter waits for its
	// risk engine to replay its state before it serves anyway (with a
	// warning): a long replay must not keep the limiter from answering.
	riskReadyTimeout = 10 * time.Second
	// defaultSweepEvery is how often the memory store drops full buckets
	// (storeConfig.SweepEvery's default): often enough to bound memory
	// between sweeps, rarely enough that sweeping costs nothing visible.
	defaultSweepEvery = 10 * time.Second
	// riskdStoreTimeout bounds each of riskd's Redis calls (lockouts,
	// multipliers): riskd is off the request path, so it can wait longer
	// than a check's DefaultStoreTimeout.
	riskdStoreTimeout = time.Second
	// depCheckInterval is how often riskd pings Redis and NATS to log an
	// outage and its end, and how long each ping may take.
	depCheckInterval = time.Second
	// storeLostTimeout bounds riskd's check for the marker key that tells
	// a Redis restarted empty.
	storeLostTimeout = time.Second
	// offendersTTL is the expiry of the offender list riskd shares in
	// Redis: riskd rewrites it every second, so a list older than two
	// minutes means riskd stopped and the limiter must not serve it.
	offendersTTL = 2 * time.Minute
	// leasePoll is how often a standby riskd tries to take the leadership
	// lease: a tenth of DefaultLeaseTTL, so a lost leader is replaced
	// soon after its lease expires.
	leasePoll = 500 * time.Millisecond
	// alertRestartDelay spaces the restarts of a stopped alert delivery
	// loop, so a persistent failure does not spin.
	alertRestartDelay = time.Second
)
