package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/signals"
	"github.com/tollgate-dev/tollgate/streams"
)

// embeddedNATS is the one-process default's NATS server: JetStream on
// loopback, in a stable directory (natsStoreDir) or a temp dir. Run stops
// it when ctx ends and removes a temp dir.
type embeddedNATS struct {
	dir    string
	temp   bool   // dir is removed at the end
	unlock func() // releases a stable dir's lock (nil for a temp dir)
	srv    *streams.Embedded
}

var _ component = (*embeddedNATS)(nil)

// natsServerConfig configures the embedded NATS server.
type natsServerConfig struct {
	// Port is the client port (0: a free one).
	Port int
	// Dir is the JetStream store directory, kept across restarts ("": a
	// temp dir, removed at the end). A Dir another process holds is
	// replaced by a temp dir, with a warning.
	Dir    string
	Logger *slog.Logger
}

// Validate checks the port.
func (c natsServerConfig) Validate() error {
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("service: nats port %d is not a TCP port", c.Port)
	}
	return nil
}

// newEmbeddedNATS validates c and starts the server.
func newEmbeddedNATS(c natsServerConfig) (*embeddedNATS, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	e := &embeddedNATS{dir: c.Dir}
	if c.Dir != "" {
		unlock, err := openStoreDir(c.Dir)
		switch {
		case errors.Is(err, errStoreDirBusy):
			c.Logger.Warn("embedded nats: store dir held by another limiter; this one keeps its audit record and alerts in a temp dir, lost at exit",
				"dir", c.Dir)
			e.dir = ""
		case err != nil:
			return nil, err
		default:
			e.unlock = unlock
		}
	}
	if e.dir == "" {
		dir, err := os.MkdirTemp("", "tollgate-nats-")
		if err != nil {
			return nil, fmt.Errorf("service: nats temp dir: %w", err)
		}
		e.dir, e.temp = dir, true
	}
	srv, err := streams.StartEmbedded(e.dir, c.Port)
	if err != nil {
		e.release()
		return nil, err
	}
	e.srv = srv
	return e, nil
}

// release unlocks a stable dir, or removes a temp one.
func (e *embeddedNATS) release() error {
	if e.unlock != nil {
		e.unlock()
	}
	if e.temp {
		return os.RemoveAll(e.dir)
	}
	return nil
}

// Run waits for ctx, then stops the server and releases its store.
func (e *embeddedNATS) Run(ctx context.Context) error {
	<-ctx.Done()
	e.srv.Stop()
	if err := e.release(); err != nil {
		return fmt.Errorf("remove nats store: %w", err)
	}
	return nil
}

// eventsConfig configures the event publisher component: a connection
// to NATS and the publisher of decisions, reports, audits and alerts.
type eventsConfig struct {
	// URL is the NATS server(s) (required).
	URL string
	// Auth is the CA and credentials files to connect with.
	Auth streams.Auth
	// Client names the connection ("tollgate-limiter", "tollgate-riskd").
	Client string
	// Streams names the subjects and streams.
	Streams streams.Config
	// OnDrop counts dropped decisions (nil: not counted).
	OnDrop func(n int)
	// Ensure creates or updates the streams at start (the limiter; riskd's
	// daemon ensures them itself). A failure is logged, not fatal.
	Ensure bool
	// Dial dials once first and logs a failure with its cause (an
	// embedded server needs none); Consequence says what it means.
	Dial        bool
	Consequence string
	Logger      *slog.Logger
}

// Validate checks that a server is named.
func (c eventsConfig) Validate() error {
	if c.URL == "" {
		return errors.New("service: events: no nats url")
	}
	return nil
}

// eventsComponent holds the NATS connection and the publisher; Run closes
// both (the publisher flushing what is queued) when ctx ends.
type eventsComponent struct {
	url string
	nc  *nats.Conn
	pub *streams.Publisher
}

var _ component = (*eventsComponent)(nil)

// newEvents connects (retrying in the background: the daemons never wait
// on NATS) and starts the publisher.
func newEvents(ctx context.Context, c eventsConfig) (*eventsComponent, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	// One dial first, for its real cause: the retrying connection below
	// would only report "outbound buffer limit exceeded" for the streams.
	reachable := !c.Dial || dialNATSOnce(c.Logger, c.URL, c.Consequence, c.Auth)
	nc, err := streams.Connect(c.URL, c.Client, c.Auth.Options()...)
	if err != nil {
		return nil, err
	}
	pub, err := streams.NewPublisher(nc, streams.PublisherOptions{Config: c.Streams, OnDrop: c.OnDrop})
	if err != nil {
		nc.Close()
		return nil, err
	}
	if c.Ensure && reachable {
		if err := ensureStreams(ctx, pub, c.Streams); err != nil {
			// The limiter never waits on NATS: it starts, drops and counts
			// events, and riskd creates the streams when NATS is back.
			c.Logger.Warn("nats streams not ensured; decisions are dropped until NATS answers", "err", err)
		}
	}
	return &eventsComponent{url: c.URL, nc: nc, pub: pub}, nil
}

// Run waits for ctx, then flushes and closes the publisher and the connection.
func (e *eventsComponent) Run(ctx context.Context) error {
	<-ctx.Done()
	e.pub.Close()
	e.nc.Close()
	return nil
}

// state is "up" while connected, else "down".
func (e *eventsComponent) state() string {
	if e.nc.IsConnected() {
		return "up"
	}
	return "down"
}

// ping is "up" when the server answers a PING within ctx, else "down"
// with the cause: a connection that is open but unanswered (a paused
// server, a black-holing network) stays "connected" for minutes, until
// the client's own pings give up.
func (e *eventsComponent) ping(ctx context.Context) (string, error) {
	return pingNATS(ctx, e.nc)
}

// pingNATS is eventsComponent.ping of nc.
func pingNATS(ctx context.Context, nc *nats.Conn) (string, error) {
	if !nc.IsConnected() {
		return "down", natsCause(nc)
	}
	if err := nc.FlushWithContext(ctx); err != nil {
		return "down", fmt.Errorf("no answer to a ping: %w", err)
	}
	return "up", nil
}

// ensureStreams creates or updates the streams, waiting up to
// streamsSetupTimeout.
func ensureStreams(ctx context.Context, pub *streams.Publisher, scfg streams.Config) error {
	sctx, cancel := context.WithTimeout(ctx, streamsSetupTimeout)
	defer cancel()
	return streams.EnsureStreams(sctx, pub.JetStream(), scfg)
}

// offendersKey holds riskd's offender list (JSON) for the limiter to serve.
func offendersKey(prefix string) string { return bucket.OffendersKey(prefix) }

// redisOffenders reads the offender list riskd writes to Redis.
func redisOffenders(rc redis.UniversalClient, prefix string) func(ctx context.Context) ([]signals.Offender, error) {
	return func(ctx context.Context) ([]signals.Offender, error) {
		v, err := rc.Get(ctx, offendersKey(prefix)).Bytes()
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("service: read offenders: %w", err)
		}
		var list []signals.Offender
		if err := json.Unmarshal(v, &list); err != nil {
			return nil, fmt.Errorf("service: decode offenders: %w", err)
		}
		return list, nil
	}
}
