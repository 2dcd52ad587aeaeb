package risk

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/signals"
	"github.com/tollgate-dev/tollgate/streams"
)

// Trusted devices survive a Redis that lost them (7.1).
//
// riskd enrols a device in an account's trust set on a login_succeeded
// that proved the device (its token). The sets live in the store, so a
// Redis that restarted empty would forget them: the account's owner would
// be locked out by an exempt_attested lockout riskd re-asserts, and would
// share the attacker's budget of a `trusted_devices: own` limit. So riskd
// keeps its own record of every enrolment in force, built from the
// reports it processes and, at start, from the login_succeeded reports of
// the last trusted_for still in the events stream, and writes it back
// whenever the store says it lost its data (StoreLost, asked every
// second), or at every re-assertion when there is no StoreLost.

// DefaultMaxTrust is Options.MaxTrust when unset.
const DefaultMaxTrust = 500_000

// trustRecord is riskd's record of the trusted devices in force: account
// "\x00" device -> until. When full, expired entries go, then the
// hundredth of the record that ends first, in one pass (makeRoom), so a
// full record costs an enrolment O(1) amortised, not a scan. Safe for
// concurrent use.
type trustRecord struct {
	mu  sync.Mutex
	max int
	m   map[string]time.Time
	// evicted counts the enrolments in force dropped for room: riskd no
	// longer re-asserts them (the store keeps them until they end).
	evicted uint64
}

// TrustRecord is a record of trusted devices that outlives a Daemon:
// riskd makes one for the life of the process and hands it to the daemon
// of each leadership (Options.Trust). A Redis that restarted empty also
// takes riskd's lease with it, so riskd leads again with a new daemon
// just when the record is needed; a daemon of its own would know only
// the enrolments whose reports the events stream still holds (48 h by
// default, where a device stays trusted for 30 days). Safe for
// concurrent use.
type TrustRecord struct{ r trustRecord }

// NewTrustRecord returns an empty record of at most max enrolments
// (DefaultMaxTrust when max <= 0).
func NewTrustRecord(max int) *TrustRecord {
	if max <= 0 {
		max = DefaultMaxTrust
	}
	return &TrustRecord{r: trustRecord{max: max, m: map[string]time.Time{}}}
}

// set records device as trusted by account until until (a later end wins).
func (r *trustRecord) set(account, device string, until, now time.Time) {
	k := account + "\x00" + device
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.m[k]; ok {
		if until.After(old) {
			r.m[k] = until
		}
		return
	}
	if len(r.m) >= r.max {
		r.makeRoom(now)
	}
	r.m[k] = until
}

// makeRoom drops the expired entries and, unless that freed a hundredth
// of the record, the entries ending first until it has; r.mu must be held.
func (r *trustRecord) makeRoom(now time.Time) {
	type kv struct {
		k string
		u time.Time
	}
	free := max(r.max/100, 1)
	live := make([]kv, 0, len(r.m))
	for k, u := range r.m {
		if !u.After(now) {
			delete(r.m, k)
			continue
		}
		live = append(live, kv{k, u})
	}
	drop := len(r.m) - (r.max - free)
	if drop <= 0 {
		return
	}
	slices.SortFunc(live, func(a, b kv) int { return a.u.Compare(b.u) })
	for _, e := range live[:drop] {
		delete(r.m, e.k)
	}
	r.evicted += uint64(drop)
}

// evictions returns how many enrolments in force were dropped for room.
func (r *trustRecord) evictions() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.evicted
}

// trustEntry is one recorded enrolment.
type trustEntry struct {
	account, device string
	until           time.Time
}

// active returns the enrolments in force at now, forgetting the others.
func (r *trustRecord) active(now time.Time) []trustEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]trustEntry, 0, len(r.m))
	for k, u := range r.m {
		if !u.After(now) {
			delete(r.m, k)
			continue
		}
		for i := 0; i < len(k); i++ {
			if k[i] == 0 {
				out = append(out, trustEntry{account: k[:i], device: k[i+1:], until: u})
				break
			}
		}
	}
	return out
}

// recordTrust records the enrolments among actions.
func (d *Daemon) recordTrust(actions []signals.Action) {
	now := d.o.Now()
	for i := range actions {
		if a := &actions[i]; a.Kind == ActionTrust {
			d.trusts.set(a.ID, a.Lock.Rule, a.Lock.Until, now)
		}
	}
}

// trustFor is how long a login_succeeded with a proven device trusts it.
func (d *Daemon) trustFor() time.Duration {
	if d.o.TrustFor > 0 {
		return d.o.TrustFor
	}
	return TrustFor(d.o.Policy())
}

// readTrust rebuilds the trust record at start from the login_succeeded
// reports of the last trustFor still in the events stream (one subject,
// so it reads nothing else), up to the stream's last sequence when it
// starts. A failed fetch is logged and retried, never taken for the end
// (7.5): riskd would re-assert none of the devices it did not read.
func (d *Daemon) readTrust(ctx context.Context) error {
	stream := d.o.Streams.Stream(streams.EventsStream)
	end, err := d.lastSeq(ctx, stream)
	if err != nil {
		return fmt.Errorf("risk: trust record: %w", err)
	}
	var acts []signals.Action
	n, err := d.readBack(ctx, "trust", stream, d.o.Streams.Prefix+"reports."+streams.ReportLoginSucceeded,
		d.o.Now().Add(-d.trustFor()), end, func(m jetstream.Msg) {
			var r streams.Report
			if json.Unmarshal(m.Data(), &r) == nil {
				r.Account = policy.NormalizeAccount(r.Account)
				acts = TrustAction(&r, d.trustFor(), acts[:0])
				d.recordTrust(acts)
			}
		})
	if err != nil {
		return fmt.Errorf("risk: trust record: %w", err)
	}
	d.log.Info("trust record read", "reports", n)
	return nil
}

// reassertTrust writes every recorded enrolment in force to the store,
// asking Leading before each write; ErrNotLeading once the lease lapsed.
func (d *Daemon) reassertTrust(ctx context.Context, now time.Time) error {
	for _, e := range d.trusts.active(now) {
		if !d.Leading() {
			return ErrNotLeading
		}
		wctx, cancel := d.leadCtx(ctx)
		if err := d.o.Store.Trust(wctx, bucket.Subject{Kind: "account", ID: e.account}, e.device, e.until); err != nil {
			d.count("store")
		}
		cancel()
	}
	return nil
}
