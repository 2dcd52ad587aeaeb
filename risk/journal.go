package risk

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// journalBatch bounds the enrolments journaled per housekeeping second:
// a record of 500,000 read from Redis at an upgrade is journaled over
// minutes, not in one burst that stalls the tick.
const journalBatch = 5000

// readJournal seeds the trust record at start from riskd's trust journal
// (streams.TrustStream: the latest enrolment per account and device,
// kept past the events stream's 48 h), so that an enrolment older than
// the events stream survives a Redis that lost its trust sets before
// this riskd read them (Redis and riskd lost together). It runs after the
// audit stream was read, so that a revoked enrolment is refused (set), and
// before riskd is ready. A failed fetch is logged and retried (readBack).
func (d *Daemon) readJournal(ctx context.Context) error {
	stream := d.o.Streams.Stream(streams.TrustStream)
	end, err := d.lastSeq(ctx, stream)
	if err != nil {
		return fmt.Errorf("risk: trust journal: %w", err)
	}
	now := d.o.Now()
	kept := 0
	// no filter: the stream holds the journal alone, and a filter over its
	// one subject per enrolment costs the server a pass over them all at
	// every fetch: a start of 8.1-9.1 s at 100,000 enrolments with the
	// filter, 0.70-1.15 s without (BenchmarkDaemonStartTrustJournal)
	n, err := d.readBack(ctx, "trust_journal", stream, "", time.Unix(0, 0), end, func(m jetstream.Msg) {
		var e streams.TrustEnrolment
		if json.Unmarshal(m.Data(), &e) != nil || e.Account == "" || e.Device == "" || !e.Until.After(now) {
			return
		}
		e.Account = policy.NormalizeAccount(e.Account)
		if d.trusts.set(e.Account, e.Device, e.Until, e.At, tokenProof{}, now) {
			d.trusts.journaled(e.Account, e.Device, e.Until)
			kept++
		}
	})
	if err != nil {
		return fmt.Errorf("risk: trust journal: %w", err)
	}
	d.log.Info("trust journal read", "messages", n, "enrolments", kept)
	return nil
}

// journalTrust journals the enrolments due (trustRecord.takeDirty), at
// most journalBatch, and waits for their acks together, at most
// journalWait. When a flush fails (a write refused or unacknowledged:
// NATS down, or a riskd user not allowed to publish <prefix>trust.>)
// the enrolments are queued again, the failure is logged and counted
// (errors_total{op="trust_journal"}), and the next flush waits 2, 4, ...
// up to 64 s, so that housekeeping is not held journalWait every second.
func (d *Daemon) journalTrust(ctx context.Context) {
	now := d.o.Now()
	if now.Before(d.journalNext) {
		return
	}
	es := d.trusts.takeDirty(journalBatch)
	if len(es) == 0 {
		return
	}
	if err := d.journal(ctx, es); err != nil {
		d.count("trust_journal")
		d.journalFails++
		wait := time.Second << min(d.journalFails, 6)
		d.journalNext = now.Add(wait)
		d.log.Warn("trust journal not written; retrying", "enrolments", len(es), "retry_in", wait, "err", err)
		return
	}
	d.journalFails = 0
}

// journalWait bounds the wait for a flush's acks.
const journalWait = 2 * time.Second

// journal writes es to the trust journal and waits for the acks; on an
// error the enrolments not acknowledged are queued again.
func (d *Daemon) journal(ctx context.Context, es []trustEntry) error {
	futs := make([]jetstream.PubAckFuture, 0, len(es))
	for i, e := range es {
		f, err := d.o.Publisher.TrustAsync(&streams.TrustEnrolment{V: streams.SchemaVersion,
			Account: e.account, Device: e.device, Until: e.until.UTC(), At: e.at.UTC()})
		if err != nil {
			d.requeue(es[i:])
			return err // the rest after it would fail alike
		}
		futs = append(futs, f)
	}
	wait := time.NewTimer(journalWait)
	defer wait.Stop()
	for i, f := range futs {
		var err error
		select {
		case <-f.Ok():
			continue
		case err = <-f.Err():
		case <-wait.C:
			err = fmt.Errorf("no ack within %s", journalWait)
		case <-ctx.Done():
			err = ctx.Err()
		}
		// the latest per subject is kept: writing one twice is harmless
		d.requeue(es[i:])
		return err
	}
	return nil
}

// requeue queues es to be journaled again.
func (d *Daemon) requeue(es []trustEntry) {
	for _, e := range es {
		d.trusts.failed(e)
	}
}
