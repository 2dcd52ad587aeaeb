package risk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/streams"
)

// adminEntry is an admin multiplier as the audit stream recorded it.
type adminEntry struct {
	subject, id string
	m           bucket.Multiplier
	ts          time.Time // when the admin set it
}

// adminRecord is riskd's record of the admin multipliers in force, built
// from the audit stream, so they survive a Redis that lost them (6.5). It
// holds at most max entries: when full, expired ones go, then the oldest.
type adminRecord struct {
	max int
	m   map[string]adminEntry // subject "\x00" id -> entry
}

// set records e unless a newer change of the same subject is recorded.
func (r *adminRecord) set(e adminEntry, now time.Time) {
	k := e.subject + "\x00" + e.id
	if old, ok := r.m[k]; ok && old.ts.After(e.ts) {
		return
	}
	if _, ok := r.m[k]; !ok && len(r.m) >= r.max {
		oldest := ""
		for key, v := range r.m {
			if !v.m.ExpiresAt.IsZero() && !v.m.ExpiresAt.After(now) {
				delete(r.m, key)
				continue
			}
			if oldest == "" || v.ts.Before(r.m[oldest].ts) {
				oldest = key
			}
		}
		if len(r.m) >= r.max {
			delete(r.m, oldest)
		}
	}
	r.m[k] = e
}

// clear forgets the subject's multiplier when the clear at ts is newer
// than what is recorded; it reports whether one was recorded.
func (r *adminRecord) clear(subject, id string, ts time.Time) bool {
	k := subject + "\x00" + id
	old, ok := r.m[k]
	if !ok || old.ts.After(ts) {
		return false
	}
	delete(r.m, k)
	return true
}

// active returns the recorded multipliers unexpired at now.
func (r *adminRecord) active(now time.Time) []adminEntry {
	out := make([]adminEntry, 0, len(r.m))
	for k, e := range r.m {
		if !e.m.ExpiresAt.IsZero() && !e.m.ExpiresAt.After(now) {
			delete(r.m, k)
			continue
		}
		out = append(out, e)
	}
	return out
}

// auditReader returns an ordered consumer of the audit stream from stream
// sequence from (1: the whole stream). Its resets are bounded
// (orderedResets) so that a Fetch on a cluster that lost the consumer's
// node returns an error instead of retrying for ever without regard to
// ctx; tailAudit then makes a new one.
func (d *Daemon) auditReader(ctx context.Context, from uint64) (jetstream.Consumer, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{d.o.Streams.Prefix + "audit.>"},
		DeliverPolicy: jetstream.DeliverAllPolicy, MaxResetAttempts: orderedResets}
	if from > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	oc, err := d.js.OrderedConsumer(ctx, d.o.Streams.Stream(streams.AuditStream), cfg)
	if err != nil {
		return nil, fmt.Errorf("risk: audit reader: %w", err)
	}
	return oc, nil
}

// orderedResets bounds how often an ordered consumer recreates itself
// within one Fetch (about 3 s of backoff) before the Fetch fails.
const orderedResets = 2

// tailAudit applies every new audit event until ctx ends, starting with
// oc. When the reader fails (the NATS node holding it was lost, 7.6) it is
// logged and replaced by a new one from the next unread sequence, so that
// riskd goes on instead of stopping.
func (d *Daemon) tailAudit(ctx context.Context, oc jetstream.Consumer) error {
	for {
		err := d.readAudit(ctx, oc, false)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrNotLeading) {
			return err
		}
		d.count("audit")
		d.log.Warn("audit reader failed; starting a new one", "from_seq", d.auditNext.Load(), "err", err)
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
			if oc, err = d.auditReader(ctx, d.auditNext.Load()); err == nil {
				break
			}
			d.log.Warn("audit reader", "err", err)
		}
	}
}

// readAudit applies audit events: with catchUp, those already in the
// stream (it returns once it has read them all); otherwise every new one
// until ctx ends or a fetch fails.
func (d *Daemon) readAudit(ctx context.Context, oc jetstream.Consumer, catchUp bool) error {
	if catchUp {
		st, err := d.js.Stream(ctx, d.o.Streams.Stream(streams.AuditStream))
		if err != nil {
			return fmt.Errorf("risk: audit stream: %w", err)
		}
		if st.CachedInfo().State.Msgs == 0 {
			return nil
		}
	}
	n := 0
	for ctx.Err() == nil {
		batch, err := oc.Fetch(200, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("risk: read audit: %w", err)
		}
		caughtUp := false
		for m := range batch.Messages() { // drained whole: the next Fetch needs it done
			if !catchUp && !d.Leading() {
				return ErrNotLeading
			}
			d.applyAudit(ctx, m, !catchUp)
			n++
			if meta, err := m.Metadata(); err == nil {
				d.auditNext.Store(meta.Sequence.Stream + 1)
				caughtUp = caughtUp || meta.NumPending == 0
			}
		}
		if err := batch.Error(); err != nil && ctx.Err() == nil && !isTimeout(err) {
			return fmt.Errorf("risk: read audit: %w", err)
		}
		if catchUp && caughtUp {
			d.log.Info("audit record read", "events", n)
			return nil
		}
	}
	return nil
}

// isTimeout reports a fetch that merely found nothing within its wait.
func isTimeout(err error) bool {
	return errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}

// applyAudit applies one audit event: it records or forgets an admin
// multiplier (and, live, writes the change to the store again, so a
// concurrent re-assertion cannot undo it), or lifts a lockout in the
// signals engine (its counts reset, the lock never re-asserted) and clears
// it in the store.
func (d *Daemon) applyAudit(ctx context.Context, m jetstream.Msg, live bool) {
	var a streams.Audit
	if err := json.Unmarshal(m.Data(), &a); err != nil || a.TS.IsZero() || a.ID == "" {
		d.count("decode")
		return
	}
	d.execMu.Lock()
	defer d.execMu.Unlock()
	if live {
		var cancel context.CancelFunc
		ctx, cancel = d.leadCtx(ctx) // readAudit asked Leading
		defer cancel()
	}
	now := d.o.Now()
	switch a.Action {
	case streams.AuditMultiplierSet:
		if a.Value == nil {
			d.count("decode")
			return
		}
		mu := bucket.Multiplier{Source: "admin", Value: *a.Value, Reason: a.Reason}
		if a.ExpiresAt != nil {
			mu.ExpiresAt = *a.ExpiresAt
		}
		d.admins.set(adminEntry{subject: a.Subject, id: a.ID, m: mu, ts: a.TS}, now)
		if live && (mu.ExpiresAt.IsZero() || mu.ExpiresAt.After(now)) {
			if err := d.o.Store.SetMultiplier(ctx, bucket.Subject{Kind: a.Subject, ID: a.ID}, mu); err != nil {
				d.count("store")
			}
		}
	case streams.AuditMultiplierClear:
		if d.admins.clear(a.Subject, a.ID, a.TS) {
			if err := d.o.Store.ClearMultiplier(ctx, bucket.Subject{Kind: a.Subject, ID: a.ID}, "admin"); err != nil {
				d.count("store")
			}
		}
	case streams.AuditLockoutLift:
		d.mu.Lock()
		subject := a.Subject
		if subject == "" {
			subject = "account" // audit events of builds before 7.1
		}
		lifted := d.eng.LiftSubjectLock(subject, a.ID, a.TS)
		d.mu.Unlock()
		if lifted {
			for _, kind := range bucket.LockKinds(subject) { // a device's lift lifts its claim too (signals)
				if _, err := d.o.Store.ClearLock(ctx, bucket.Subject{Kind: kind, ID: a.ID}); err != nil {
					d.count("store")
				}
			}
			d.log.Info("lockout lifted by an admin; not re-asserted", "subject", subject, "id", a.ID, "request_id", a.RequestID)
		}
	case streams.AuditTrustRevoke:
		d.revokeTrust(ctx, a.ID, a.DeviceID, a.TS, live)
	case streams.AuditAttestationForget:
		// a freed id is trusted by no account (the limiter untrusted it)
		d.revokeTrust(ctx, "", a.ID, a.TS, live)
	}
}

// reassert writes every measure in force and every admin multiplier
// recorded again (a Redis that restarted empty gets them back). It asks
// Leading before each write, as do does, and stops with ErrNotLeading
// once the lease lapsed: a leader whose lease passes mid-loop writes no
// more (7.5).
func (d *Daemon) reassert(ctx context.Context, now time.Time) error {
	d.execMu.Lock()
	defer d.execMu.Unlock()
	for _, a := range d.eng.Active(now) {
		if err := d.do(ctx, &a); errors.Is(err, ErrNotLeading) {
			return err
		}
	}
	for _, e := range d.admins.active(now) {
		if !d.Leading() {
			return ErrNotLeading
		}
		wctx, cancel := d.leadCtx(ctx)
		err := d.o.Store.SetMultiplier(wctx, bucket.Subject{Kind: e.subject, ID: e.id}, e.m)
		cancel()
		if err != nil {
			d.count("store")
			continue
		}
		if d.o.Metrics != nil {
			d.o.Metrics.Multipliers.Inc()
		}
	}
	return nil
}
