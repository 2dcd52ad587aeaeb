package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stream name suffixes. Decisions are high-volume and kept briefly;
// reports and alerts are rare and kept long enough for velocity escalation
// (24 h). The full names are Config.Name + the suffix.
const (
	DecisionsStream = "_DECISIONS"
	EventsStream    = "_EVENTS"
	// AuditStream holds admin changes (<prefix>audit.>), kept for
	// AuditMaxAge: riskd rebuilds its record of admin overrides from it.
	AuditStream = "_AUDIT"
	// TrustStream is riskd's journal of trusted devices (<prefix>trust.>,
	// the latest enrolment per account and device: TrustEnrolment), so
	// that they outlive a Redis and a riskd lost together.
	TrustStream = "_TRUST"
)

// Config names the subjects and retention.
type Config struct {
	// Prefix starts every subject (default DefaultPrefix, "tollgate.").
	Prefix string
	// Name starts the stream names (default "TOLLGATE": TOLLGATE_DECISIONS,
	// TOLLGATE_EVENTS).
	Name string
	// DecisionsMaxAge is how long decisions are kept (default 1h).
	DecisionsMaxAge time.Duration
	// DecisionsMaxBytes bounds the decisions stream (default 1 GiB).
	DecisionsMaxBytes int64
	// EventsMaxAge is how long reports and alerts are kept (default 48h).
	EventsMaxAge time.Duration
	// EventsMaxBytes bounds the reports-and-alerts stream (default 1 GiB);
	// when full, the oldest events are discarded.
	EventsMaxBytes int64
	// AuditMaxAge is how long admin changes are kept (default 400 days:
	// longer than the longest admin multiplier ttl, 365 days);
	// AuditMaxBytes bounds the audit stream (default 256 MiB; the oldest
	// changes go first).
	AuditMaxAge   time.Duration
	AuditMaxBytes int64
	// TrustMaxBytes bounds the trust journal (default 128 MiB, about
	// 500,000 enrolments; the oldest go first). It keeps one message per
	// account and device, for AuditMaxAge at most.
	TrustMaxBytes int64
	// Memory keeps streams in memory instead of files (tests, embedded mode).
	Memory bool
	// Replicas is how many copies of each stream and of riskd's durable
	// consumers a NATS cluster keeps (default 1; 3 on a three-node
	// cluster survives the loss of any one node). A server that is not
	// clustered refuses more than 1.
	Replicas int
}

func (c *Config) defaults() {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.DecisionsMaxAge <= 0 {
		c.DecisionsMaxAge = time.Hour
	}
	if c.DecisionsMaxBytes <= 0 {
		c.DecisionsMaxBytes = 1 << 30
	}
	if c.EventsMaxAge <= 0 {
		c.EventsMaxAge = 48 * time.Hour
	}
	if c.EventsMaxBytes <= 0 {
		c.EventsMaxBytes = 1 << 30
	}
	if c.AuditMaxAge <= 0 {
		c.AuditMaxAge = 400 * 24 * time.Hour
	}
	if c.AuditMaxBytes <= 0 {
		c.AuditMaxBytes = 256 << 20
	}
	if c.TrustMaxBytes <= 0 {
		c.TrustMaxBytes = 128 << 20
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
}

// Stream returns the full name of a stream (DecisionsStream or EventsStream).
func (c Config) Stream(suffix string) string {
	c.defaults()
	return c.Name + suffix
}

// Subjects.
func (c Config) decisionsSubject(class string) string { return c.Prefix + "decisions." + class }
func (c Config) reportsSubject(typ string) string     { return c.Prefix + "reports." + typ }
func (c Config) alertsSubject(kind string) string     { return c.Prefix + "alerts." + kind }

// Connect dials NATS with reconnection forever and no reconnect buffer: a
// publish while disconnected fails at once (and is counted as dropped)
// instead of piling up in memory.
func Connect(url, name string, extra ...nats.Option) (*nats.Conn, error) {
	opts := append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectBufSize(-1),
		nats.RetryOnFailedConnect(true),
		nats.Timeout(2 * time.Second),
	}, extra...)
	nc, err := nats.Connect(ServerURLs(url), opts...)
	if err != nil {
		return nil, fmt.Errorf("streams: connect %s: %w", RedactURL(url), err)
	}
	return nc, nil
}

// EnsureStreams creates the three streams, or updates them to cfg when they
// exist: calling it again is harmless. Each has a size bound
// (DecisionsMaxBytes, EventsMaxBytes, AuditMaxBytes) past which the oldest
// messages go.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	cfg.defaults()
	storage := jetstream.FileStorage
	if cfg.Memory {
		storage = jetstream.MemoryStorage
	}
	for _, sc := range []jetstream.StreamConfig{
		{
			Name:        cfg.Name + DecisionsStream,
			Description: "Tollgate decisions (batched), for riskd",
			Subjects:    []string{cfg.Prefix + "decisions.>"},
			MaxAge:      cfg.DecisionsMaxAge,
			MaxBytes:    cfg.DecisionsMaxBytes,
			Storage:     storage,
			Discard:     jetstream.DiscardOld,
			Replicas:    cfg.Replicas,
		},
		{
			Name:        cfg.Name + EventsStream,
			Description: "Tollgate reports and alerts",
			Subjects:    []string{cfg.Prefix + "reports.>", cfg.Prefix + "alerts.>"},
			MaxAge:      cfg.EventsMaxAge,
			MaxBytes:    cfg.EventsMaxBytes,
			Storage:     storage,
			Discard:     jetstream.DiscardOld,
			Duplicates:  10 * time.Minute,
			Replicas:    cfg.Replicas,
		},
		{
			Name:        cfg.Name + AuditStream,
			Description: "Tollgate admin changes (audit), for operators and riskd",
			Subjects:    []string{cfg.Prefix + "audit.>"},
			MaxAge:      cfg.AuditMaxAge,
			MaxBytes:    cfg.AuditMaxBytes,
			Storage:     storage,
			Discard:     jetstream.DiscardOld,
			Duplicates:  10 * time.Minute,
			Replicas:    cfg.Replicas,
		},
		{
			Name:              cfg.Name + TrustStream,
			Description:       "Tollgate trusted devices (riskd's journal), for riskd",
			Subjects:          []string{cfg.Prefix + "trust.>"},
			MaxAge:            cfg.AuditMaxAge,
			MaxBytes:          cfg.TrustMaxBytes,
			MaxMsgsPerSubject: 1,
			Storage:           storage,
			Discard:           jetstream.DiscardOld,
			Replicas:          cfg.Replicas,
		},
	} {
		if err := ensureStream(ctx, js, sc); err != nil {
			if notClustered(err) {
				return fmt.Errorf("streams: ensure stream %s with %d replicas: the NATS server is not part of a JetStream cluster (run --stream-replicas 1, or cluster the servers: docs/scaling.md): %w", sc.Name, sc.Replicas, err)
			}
			return fmt.Errorf("streams: ensure stream %s: %w", sc.Name, err)
		}
	}
	return nil
}

// jsReplicasNotSupported is nats-server's error code for more than one
// replica on a server that is not clustered (JSStreamReplicasNotSupportedErr).
const jsReplicasNotSupported = 10074

// notClustered reports whether err is the server's refusal of replicas
// outside a cluster.
func notClustered(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsReplicasNotSupported
}

// ErrNotConnected is returned by report and alert publishing while NATS is down.
var ErrNotConnected = errors.New("streams: not connected to NATS")

// ensureStream creates sc, or updates the stream to it when one of the
// settings Tollgate manages differs; a stream already as configured is
// left alone, so that a start does not ask every server to rewrite its
// stores (nats-server's file store updates its config under the race
// detector's eye: an update with nothing to change is a cost for nothing).
func ensureStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) error {
	st, err := js.Stream(ctx, sc.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, sc)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // created meanwhile by another process
			_, err = js.UpdateStream(ctx, sc)
		}
		return err
	}
	if err != nil {
		return err
	}
	if sameManaged(st.CachedInfo().Config, sc) {
		return nil
	}
	_, err = js.UpdateStream(ctx, sc)
	return err
}

// sameManaged reports whether have already has every setting of want.
func sameManaged(have, want jetstream.StreamConfig) bool {
	return slices.Equal(have.Subjects, want.Subjects) && have.MaxAge == want.MaxAge && have.MaxBytes == want.MaxBytes &&
		have.Storage == want.Storage && have.Discard == want.Discard && (want.Duplicates == 0 || have.Duplicates == want.Duplicates) &&
		have.MaxMsgsPerSubject == want.MaxMsgsPerSubject &&
		max(have.Replicas, 1) == max(want.Replicas, 1) && have.Description == want.Description
}

// CheckNames refuses a stream name and a subject prefix NATS cannot use
// (empty values are the defaults): a stream name with white space, '.',
// '*', '>', '/' or '\', and a subject prefix with white space, '*', '>' or
// an empty token ("a..b.", ".a."). A daemon given such a value starts
// and then drops every event (the streams are never created) or fails its
// consumers, so the daemons check them as usage errors.
func CheckNames(streamName, subjectPrefix string) error {
	if err := CheckName("stream name", streamName); err != nil {
		return err
	}
	if subjectPrefix == "" {
		return nil
	}
	if strings.ContainsAny(subjectPrefix, " \t\r\n*>") || strings.Contains(strings.TrimSuffix(subjectPrefix, ".")+".", "..") || strings.HasPrefix(subjectPrefix, ".") {
		return fmt.Errorf("streams: subject prefix %q: want tokens of a NATS subject, such as tollgate. (no white space, '*', '>' or empty token)", subjectPrefix)
	}
	return nil
}

// CheckName refuses a JetStream stream or consumer name (what names it,
// e.g. "durable") that NATS cannot use; "" is the default and passes.
func CheckName(what, name string) error {
	if name != "" && strings.ContainsAny(name, " \t\r\n.*>/\\") {
		return fmt.Errorf("streams: %s %q: no white space, '.', '*', '>', '/' or '\\' in a JetStream name", what, name)
	}
	return nil
}
