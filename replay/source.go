package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// Range selects the part of the record to replay. With neither field set,
// everything the decisions stream holds is replayed.
type Range struct {
	// Since replays the decisions and reports of the last Since (by the
	// time JetStream stored them).
	Since time.Duration
	// FromSeq replays the decisions stream from this sequence on, and the
	// reports stored since that decision.
	FromSeq uint64
}

// streamReader reads one stream's messages in a range with an ephemeral
// ordered consumer (nothing durable is created or acknowledged: riskd's
// consumers are untouched) and hands their events on in event-time order.
type streamReader struct {
	name    string
	filter  string
	rank    uint8
	last    uint64 // the stream's last sequence when the replay started
	deliver jetstream.OrderedConsumerConfig
	window  time.Duration

	// batchCap is the largest batch seen: the capacity to decode into.
	batchCap int
	// dec decodes the decisions, reading only what a replay re-runs.
	dec streams.ReplayDecoder

	// progress, read by the progress printer
	first, seq atomic.Uint64
	msgs, evs  atomic.Int64
	skipped    atomic.Int64
}

// reportMargin is how much earlier than the first decision's storage time
// reports are read.
const reportMargin = time.Minute

// chunkSize is how many events a reader hands over at once.
const chunkSize = 4096

// run reads until the range ends and sends chunks of ordered events on
// out, then closes it.
func (s *streamReader) run(ctx context.Context, js jetstream.JetStream, out chan<- []event) error {
	defer close(out)
	if s.last == 0 {
		return nil
	}
	cons, err := js.OrderedConsumer(ctx, s.name, s.deliver)
	if err != nil {
		return fmt.Errorf("replay: read %s: %w", s.name, err)
	}
	ord := reorder{window: int64(s.window)}
	chunk := make([]event, 0, chunkSize)
	send := func(force bool) error {
		if len(chunk) == 0 || !force && len(chunk) < chunkSize {
			return nil
		}
		select {
		case out <- chunk:
		case <-ctx.Done():
			return ctx.Err()
		}
		chunk = make([]event, 0, chunkSize)
		return nil
	}
	it, err := cons.Messages(jetstream.PullMaxBytes(8 << 20))
	if err != nil {
		return fmt.Errorf("replay: read %s: %w", s.name, err)
	}
	defer it.Stop()
	idle := s.watch(ctx, cons, it)
	defer idle.stop()
	for {
		m, err := it.Next()
		if err != nil {
			if idle.fired.Load() {
				break // nothing (more) of ours in the range
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("replay: read %s: %w", s.name, err)
		}
		idle.seen.Store(true)
		meta, err := m.Metadata()
		if err != nil {
			continue
		}
		seq := meta.Sequence.Stream
		if seq > s.last {
			break
		}
		s.first.CompareAndSwap(0, seq)
		s.seq.Store(seq)
		s.msgs.Add(1)
		var at int64
		if !meta.Timestamp.IsZero() {
			at = meta.Timestamp.UnixNano()
		}
		chunk = s.decode(m.Data(), at, &ord, chunk)
		if err := send(false); err != nil {
			return err
		}
		// NumPending counts the messages of ours after this one.
		if seq == s.last || meta.NumPending == 0 {
			break
		}
	}
	chunk = ord.flush(chunk)
	return send(true)
}

// decode appends the message's events to chunk through the reorder
// buffer, each with at, the message's timestamp (Unix ns).
func (s *streamReader) decode(data []byte, at int64, ord *reorder, chunk []event) []event {
	if s.rank == rankDecision {
		b := streams.DecisionBatch{Decisions: make([]streams.Decision, 0, s.batchCap)}
		if err := s.dec.Decode(data, &b); err != nil {
			s.skipped.Add(1)
			return chunk
		}
		s.evs.Add(int64(len(b.Decisions)))
		s.batchCap = max(s.batchCap, len(b.Decisions))
		for i := range b.Decisions {
			d := &b.Decisions[i]
			if d.Account != "" {
				// one account however spelled (6.4), as riskd reads it
				d.Account = policy.NormalizeAccount(d.Account)
			}
			ns, ok := eventNs(d.TS)
			if !ok {
				s.skipped.Add(1)
				continue
			}
			chunk = ord.add(event{ns: ns, at: at, rank: rankDecision, d: d}, chunk)
		}
		return chunk
	}
	switch s.rank {
	case rankAudit:
		a := new(streams.Audit)
		err := json.Unmarshal(data, a)
		return s.addOne(event{at: at, rank: rankAudit, a: a}, a.TS, err == nil && a.ID != "", ord, chunk)
	case rankTrust:
		e := new(streams.TrustEnrolment)
		err := json.Unmarshal(data, e)
		_, ends := eventNs(e.Until)
		e.Account = policy.NormalizeAccount(e.Account) // as riskd reads it back
		return s.addOne(event{at: at, rank: rankTrust, e: e}, e.At, err == nil && ends && e.Account != "" && e.Device != "", ord, chunk)
	}
	r := new(streams.Report)
	err := json.Unmarshal(data, r)
	r.Account = policy.NormalizeAccount(r.Account)
	return s.addOne(event{at: at, rank: rankReport, r: r}, r.TS, err == nil, ord, chunk)
}

// addOne appends ev, the one event of a message (a report, an admin
// change, a journaled enrolment), at event time t, to chunk through the
// reorder buffer; it counts it skipped instead when it is not valid (not
// decoded, or what riskd would not apply: an admin change without an id,
// an enrolment without its account, device or end) or t is no event time.
func (s *streamReader) addOne(ev event, t time.Time, valid bool, ord *reorder, chunk []event) []event {
	ns, ok := eventNs(t)
	if !valid || !ok {
		s.skipped.Add(1)
		return chunk
	}
	ev.ns = ns
	s.evs.Add(1)
	return ord.add(ev, chunk)
}

// eventNs returns t in Unix ns, false for a zero time or one outside
// 1970-2223 (as the risk engine accepts).
func eventNs(t time.Time) (int64, bool) {
	if t.IsZero() {
		return 0, false
	}
	if s := t.Unix(); s < 0 || s > 8_000_000_000 {
		return 0, false
	}
	return t.UnixNano(), true
}

// openReaders prepares the readers of the decisions and reports streams
// for rng, at now; reports are read from warmup before the range.
func openReaders(ctx context.Context, js jetstream.JetStream, cfg streams.Config, rng Range, now time.Time, window, warmup time.Duration) (dec, rep *streamReader, err error) {
	pfx := cfg.Prefix
	if pfx == "" {
		pfx = streams.DefaultPrefix
	}
	dec = &streamReader{name: cfg.Stream(streams.DecisionsStream), filter: pfx + "decisions.>", rank: rankDecision, window: window}
	rep = &streamReader{name: cfg.Stream(streams.EventsStream), filter: pfx + "reports.>", rank: rankReport, window: window}
	ds, dinfo, err := streamInfo(ctx, js, dec.name)
	if err != nil {
		return nil, nil, err
	}
	_, einfo, err := streamInfo(ctx, js, rep.name)
	if err != nil {
		return nil, nil, err
	}
	dec.last, rep.last = dinfo.State.LastSeq, einfo.State.LastSeq
	if dinfo.State.Msgs == 0 {
		dec.last = 0
	}
	// The server drops the ephemeral consumers soon after the replay.
	dec.deliver = jetstream.OrderedConsumerConfig{FilterSubjects: []string{dec.filter}, InactiveThreshold: 5 * time.Second}
	rep.deliver = jetstream.OrderedConsumerConfig{FilterSubjects: []string{rep.filter}, InactiveThreshold: 5 * time.Second}
	var from time.Time
	switch {
	case rng.Since > 0:
		from = now.Add(-rng.Since)
		start := from
		dec.deliver.DeliverPolicy, dec.deliver.OptStartTime = jetstream.DeliverByStartTimePolicy, &start
	default:
		seq := max(rng.FromSeq, dinfo.State.FirstSeq)
		if rng.FromSeq > 0 && rng.FromSeq > dinfo.State.LastSeq {
			return nil, nil, fmt.Errorf("replay: --from-seq %d is after the last decision in %s (sequence %d)", rng.FromSeq, dec.name, dinfo.State.LastSeq)
		}
		if dec.last == 0 {
			break
		}
		m, err := ds.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(dec.filter))
		if err != nil {
			return nil, nil, fmt.Errorf("replay: decision at sequence %d: %w", seq, err)
		}
		from = m.Time
		dec.deliver.DeliverPolicy, dec.deliver.OptStartSeq = jetstream.DeliverByStartSequencePolicy, m.Sequence
	}
	if dec.last == 0 {
		rep.last = 0 // no decisions: nothing to compare
		return dec, rep, nil
	}
	// Reports of the warm-up before the first decision count (velocity
	// windows reach back), and decisions are stored up to a batch interval
	// after they were made, reports at once: read the reports from a
	// margin earlier still; the merge drops those before the warm-up.
	repFrom := from.Add(-warmup - reportMargin)
	rep.deliver.DeliverPolicy, rep.deliver.OptStartTime = jetstream.DeliverByStartTimePolicy, &repFrom
	if einfo.State.Msgs == 0 {
		rep.last = 0
	}
	return dec, rep, nil
}

// streamInfo returns the stream named name and its current state.
func streamInfo(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, *jetstream.StreamInfo, error) {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return nil, nil, fmt.Errorf("replay: stream %s: %w", name, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("replay: stream %s: %w", name, err)
	}
	return st, info, nil
}

// idleWatch stops a message iterator that receives nothing at all while
// the consumer has nothing pending: the range holds no message of the
// reader's subjects. Once a message arrives, its metadata tells how many
// more are pending, and the watch ends.
type idleWatch struct {
	seen, fired atomic.Bool
	done        chan struct{}
}

func (w *idleWatch) stop() { close(w.done) }

// watch starts an idleWatch on it.
func (s *streamReader) watch(ctx context.Context, cons jetstream.Consumer, it jetstream.MessagesContext) *idleWatch {
	w := &idleWatch{done: make(chan struct{})}
	go func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-ctx.Done():
				it.Stop()
				return
			case <-t.C:
			}
			if w.seen.Load() {
				return
			}
			if info, err := cons.Info(ctx); err == nil && info.NumPending == 0 && info.Delivered.Consumer == 0 {
				w.fired.Store(true)
				it.Stop()
				return
			}
		}
	}()
	return w
}

// openAudit prepares the reader of the audit stream: all of it, as riskd
// reads it (an admin multiplier set a month before the range is in force
// during it), up to its last sequence now. A record without an audit
// stream (nothing was ever changed by hand, or a limiter older than it)
// has nothing to read.
func openAudit(ctx context.Context, js jetstream.JetStream, cfg streams.Config, window time.Duration) (*streamReader, error) {
	return openWhole(ctx, js, cfg.Stream(streams.AuditStream), prefixOf(cfg)+"audit.>", rankAudit, window)
}

// openJournal prepares the reader of riskd's trust journal, all of it
// (seedTrust); a record without one (riskd older than it) has nothing to
// read.
func openJournal(ctx context.Context, js jetstream.JetStream, cfg streams.Config, window time.Duration) (*streamReader, error) {
	// no filter: the stream holds the journal alone, and a filter over
	// its one subject per enrolment costs the server a pass over them all
	// at every fetch (as riskd's readJournal found)
	return openWhole(ctx, js, cfg.Stream(streams.TrustStream), "", rankTrust, window)
}

// prefixOf is cfg's subject prefix, or the default.
func prefixOf(cfg streams.Config) string {
	if cfg.Prefix == "" {
		return streams.DefaultPrefix
	}
	return cfg.Prefix
}

// openWhole prepares a reader of the whole stream name (filter; "": all
// its subjects), up to its last sequence now; a stream that does not
// exist has nothing to read.
func openWhole(ctx context.Context, js jetstream.JetStream, name, filter string, rank uint8, window time.Duration) (*streamReader, error) {
	s := &streamReader{name: name, filter: filter, rank: rank, window: window}
	s.deliver = jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy, InactiveThreshold: 5 * time.Second}
	if filter != "" {
		s.deliver.FilterSubjects = []string{filter}
	}
	_, info, err := streamInfo(ctx, js, name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return s, nil
	case err != nil:
		return nil, err
	}
	if info.State.Msgs > 0 {
		s.last = info.State.LastSeq
	}
	return s, nil
}
