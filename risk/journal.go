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
	n, err := d.readBack(ctx, "trust_journal", stream, d.o.Streams.Prefix+"trust.>", time.Unix(0, 0), end, func(m jetstream.Msg) {
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
// most journalBatch, and waits for their acks together; one that fails
// is queued again and counted (errors_total{op="trust_journal"}).
func (d *Daemon) journalTrust(ctx context.Context) {
	es := d.trusts.takeDirty(journalBatch)
	if len(es) == 0 {
		return
	}
	futs := make([]jetstream.PubAckFuture, len(es))
	for i, e := range es {
		f, err := d.o.Publisher.TrustAsync(&streams.TrustEnrolment{V: streams.SchemaVersion,
			Account: e.account, Device: e.device, Until: e.until.UTC(), At: e.at.UTC()})
		if err != nil {
			d.trusts.failed(e)
			d.count("trust_journal")
			continue
		}
		futs[i] = f
	}
	wait := time.NewTimer(10 * time.Second)
	defer wait.Stop()
	for i, f := range futs {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
			continue
		case <-f.Err():
		case <-wait.C:
		case <-ctx.Done():
		}
		// unacknowledged: journaled again (the latest per subject is kept)
		for _, e := range es[i:] {
			d.trusts.failed(e)
		}
		d.count("trust_journal")
		return
	}
}
