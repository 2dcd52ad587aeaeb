package streams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Trail reads the newest audit events and alerts back from their streams,
// for GET /v1/admin/audit and /v1/admin/alerts (contract 7.3). It is safe
// for concurrent use.
type Trail struct {
	js  jetstream.JetStream
	cfg Config
}

// NewTrail returns a Trail over js with cfg's stream names and subjects.
func NewTrail(js jetstream.JetStream, cfg Config) *Trail {
	cfg.defaults()
	return &Trail{js: js, cfg: cfg}
}

// Audits returns the newest admin changes (<prefix>audit.>), at most
// limit, newest first, each as it was published.
func (t *Trail) Audits(ctx context.Context, limit int) ([]json.RawMessage, error) {
	return Recent(ctx, t.js, t.cfg.Stream(AuditStream), t.cfg.Prefix+"audit.>", limit)
}

// Alerts returns the newest alerts (<prefix>alerts.>, shadow ones
// included), at most limit, newest first, each as it was published.
func (t *Trail) Alerts(ctx context.Context, limit int) ([]json.RawMessage, error) {
	return Recent(ctx, t.js, t.cfg.Stream(EventsStream), t.cfg.Prefix+"alerts.>", limit)
}

// recentWindow is the first window of sequence numbers Recent reads back.
const recentWindow = 256

// Recent returns the data of the newest messages of stream on subjects
// matching filter, at most limit, newest first. It reads backwards in
// windows of sequence numbers (each four times the last), the server
// filtering each, so a rare subject in a busy stream costs a few reads,
// and it holds at most limit messages. Messages that are not a JSON
// value are skipped.
func Recent(ctx context.Context, js jetstream.JetStream, stream, filter string, limit int) ([]json.RawMessage, error) {
	if limit <= 0 {
		return nil, nil
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("streams: stream %s: %w", stream, err)
	}
	state := st.CachedInfo().State
	if state.Msgs == 0 {
		return []json.RawMessage{}, nil
	}
	out := make([]json.RawMessage, 0, min(limit, 1024))
	window := max(uint64(limit)*4, recentWindow)
	for end := state.LastSeq; len(out) < limit; window *= 4 {
		start := state.FirstSeq
		if end-state.FirstSeq+1 > window {
			start = end - window + 1
		}
		chunk, err := readRange(ctx, js, stream, filter, start, end, limit-len(out))
		if err != nil {
			return nil, err
		}
		for i := len(chunk) - 1; i >= 0; i-- {
			out = append(out, chunk[i])
		}
		if start <= state.FirstSeq {
			break
		}
		end = start - 1
	}
	return out, nil
}

// readRange returns the last keep messages on filter with sequence
// numbers from start to end, oldest first.
func readRange(ctx context.Context, js jetstream.JetStream, stream, filter string, start, end uint64, keep int) ([]json.RawMessage, error) {
	oc, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start,
		InactiveThreshold: 10 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("streams: read %s: %w", stream, err)
	}
	info, err := oc.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("streams: read %s: %w", stream, err)
	}
	ring := make([]json.RawMessage, 0, keep) // the last keep read, ring[next] the oldest once full
	next := 0
	for pending := info.NumPending; pending > 0; {
		batch, err := oc.Fetch(int(min(pending, 256)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("streams: read %s: %w", stream, err)
		}
		got := 0
		for m := range batch.Messages() { // drained whole: the next Fetch needs it done
			got++
			meta, err := m.Metadata()
			if err != nil || meta.Sequence.Stream > end {
				pending = 0
				continue
			}
			pending = meta.NumPending
			if !json.Valid(m.Data()) {
				continue
			}
			if len(ring) < keep {
				ring = append(ring, json.RawMessage(m.Data()))
			} else {
				ring[next] = json.RawMessage(m.Data())
				next = (next + 1) % keep
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, fmt.Errorf("streams: read %s: %w", stream, err)
		}
		if got == 0 { // pending said more, none came within the wait: messages deleted meanwhile
			break
		}
	}
	return append(ring[next:len(ring):len(ring)], ring[:next]...), nil
}
