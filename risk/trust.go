package risk

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
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
// "\x00" device -> until and when it was enrolled. When full, expired
// entries go, then the hundredth of the record that ends first, in one
// pass (makeRoom), so a full record costs an enrolment O(1) amortised,
// not a scan. It also records the revocations of the audit stream (an
// admin's trust_revoke, a freed device id's attestation_forget), so that
// no enrolment older than its revocation is recorded again (a report read
// back at start, or delivered again). Safe for concurrent use.
type trustRecord struct {
	mu  sync.Mutex
	max int
	m   map[string]trustVal
	// revoked: account "\x00" device, account "\x00" (every device of
	// the account) or "\x00" device (a freed id, in every account) ->
	// the latest revocation's time; at most max, the oldest dropped first.
	revoked map[string]time.Time
	// evicted counts the enrolments in force dropped for room: riskd no
	// longer re-asserts them (the store keeps them until they end).
	evicted uint64
}

// trustVal is one recorded enrolment: its end, and the time of the
// login_succeeded that made it (judged against revocations).
type trustVal struct{ until, at time.Time }

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
	return &TrustRecord{r: trustRecord{max: max, m: map[string]trustVal{}, revoked: map[string]time.Time{}}}
}

// set records device as trusted by account until until, enrolled at at
// (a later end wins), and reports true; false, recording nothing, when a
// revocation at or after at is recorded.
func (r *trustRecord) set(account, device string, until, at, now time.Time) bool {
	k := account + "\x00" + device
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.revokedSince(account, device, at) {
		return false
	}
	if old, ok := r.m[k]; ok {
		if until.After(old.until) {
			old.until = until
		}
		if at.After(old.at) {
			old.at = at
		}
		r.m[k] = old
		return true
	}
	if len(r.m) >= r.max {
		r.makeRoom(now)
	}
	r.m[k] = trustVal{until: until, at: at}
	return true
}

// revokeSkew is how long after its ts a revocation still covers an
// enrolment: a login_succeeded is stamped by the limiter host that took
// it, the revocation by the one that made it, and their clocks may be
// apart by up to signals.MaxClockSkew, so a login taken before the
// revocation by a host ahead is stamped after it. A device that logs in
// again within it is not trusted by that login (its next one is).
const revokeSkew = signals.MaxClockSkew

// revokedSince reports whether a revocation of (account, device) is
// recorded that covers an enrolment at at (at or after at - revokeSkew);
// r.mu must be held.
func (r *trustRecord) revokedSince(account, device string, at time.Time) bool {
	for _, k := range [...]string{account + "\x00" + device, account + "\x00", "\x00" + device} {
		if ts, ok := r.revoked[k]; ok && !ts.Add(revokeSkew).Before(at) {
			return true
		}
	}
	return false
}

// revoke records the revocation at ts of device's trust by account
// (account "": by every account, a freed id; device "": of every device
// of the account) and drops the recorded enrolments it revokes, those
// made at or before ts + revokeSkew; it returns them. Revocations older
// than horizon (no enrolment they cover is still in force) go first when
// the record of revocations is full, then the oldest.
func (r *trustRecord) revoke(account, device string, ts, horizon time.Time) []trustEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := account + "\x00" + device
	if old, ok := r.revoked[k]; !ok || ts.After(old) {
		if !ok && len(r.revoked) >= r.max {
			r.pruneRevoked(horizon)
		}
		r.revoked[k] = ts
	}
	var out []trustEntry
	for key, v := range r.m {
		a, d, _ := strings.Cut(key, "\x00")
		if (account == "" || a == account) && (device == "" || d == device) && !v.at.After(ts.Add(revokeSkew)) {
			delete(r.m, key)
			out = append(out, trustEntry{account: a, device: d, until: v.until})
		}
	}
	return out
}

// pruneRevoked drops the revocations older than horizon and, if none
// was, the oldest; r.mu must be held.
func (r *trustRecord) pruneRevoked(horizon time.Time) {
	oldest := ""
	for k, ts := range r.revoked {
		if ts.Before(horizon) {
			delete(r.revoked, k)
			continue
		}
		if oldest == "" || ts.Before(r.revoked[oldest]) {
			oldest = k
		}
	}
	if len(r.revoked) >= r.max {
		delete(r.revoked, oldest)
	}
}

// holds reports whether the record holds account's enrolment of device
// until until (or later).
func (r *trustRecord) holds(account, device string, until time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.m[account+"\x00"+device]
	return ok && !v.until.Before(until)
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
	for k, v := range r.m {
		if !v.until.After(now) {
			delete(r.m, k)
			continue
		}
		live = append(live, kv{k, v.until})
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
	for k, v := range r.m {
		if !v.until.After(now) {
			delete(r.m, k)
			continue
		}
		a, d, _ := strings.Cut(k, "\x00")
		out = append(out, trustEntry{account: a, device: d, until: v.until})
	}
	return out
}

// recordTrust records the enrolments among actions[from:], made by a
// login_succeeded at at, and returns actions less those a revocation
// recorded since at has revoked: a report read again (delivered anew,
// read back at start) never trusts a device an admin disowned after it.
func (d *Daemon) recordTrust(actions []signals.Action, from int, at time.Time) []signals.Action {
	now := d.o.Now()
	kept := actions[:from]
	for _, a := range actions[from:] {
		if a.Kind == ActionTrust && !d.trusts.set(a.ID, a.Lock.Rule, a.Lock.Until, at, now) {
			continue
		}
		kept = append(kept, a)
	}
	return kept
}

// revokeTrust applies a trust revocation of the audit stream (Audit's
// trust_revoke, or attestation_forget with account ""): the record drops
// the enrolments it revokes and, live, the store loses them again, in
// case a re-assertion wrote one back after the limiter's revocation. An
// enrolment made after the revocation is kept. d.execMu held.
func (d *Daemon) revokeTrust(ctx context.Context, account, device string, ts time.Time, live bool) {
	now := d.o.Now()
	dropped := d.trusts.revoke(account, device, ts, now.Add(-d.trustFor()-revokeSkew))
	if !live {
		return
	}
	for _, e := range dropped {
		if _, err := d.o.Store.Untrust(ctx, bucket.Subject{Kind: "account", ID: e.account}, e.device); err != nil {
			d.count("store")
		}
	}
	d.log.Info("trust revoked by an admin; not re-asserted", "account", account, "device", device, "recorded", len(dropped))
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
				acts = d.recordTrust(TrustAction(&r, d.trustFor(), acts[:0]), 0, r.TS)
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
		if err := d.reassertOne(ctx, e); err != nil {
			d.count("store")
		}
	}
	return nil
}

// reassertOne writes e to the store if the record still holds it, under
// execMu: a revocation (revokeTrust) either comes after the write and
// takes it out again, or before it and the write is skipped.
func (d *Daemon) reassertOne(ctx context.Context, e trustEntry) error {
	d.execMu.Lock()
	defer d.execMu.Unlock()
	if !d.trusts.holds(e.account, e.device, e.until) {
		return nil
	}
	wctx, cancel := d.leadCtx(ctx)
	defer cancel()
	return d.o.Store.Trust(wctx, bucket.Subject{Kind: "account", ID: e.account}, e.device, e.until)
}
