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
// the last trusted_for still in the events stream and from the store's
// trust sets themselves (scanTrust: the stream keeps 48 h, trust lasts 30
// days), and writes it back
// whenever the store says it lost its data (StoreLost, asked every
// second), or at every re-assertion when there is no StoreLost.

// DefaultMaxTrust is Options.MaxTrust when unset.
const DefaultMaxTrust = 500_000

// trustRecord is riskd's record of the trusted devices in force: account
// "\x00" device -> until and when it was enrolled. When full, expired
// entries go, then the hundredth of the record that ends first, in one
// pass (makeRoom), so a full record costs an enrolment O(1) amortised, not
// a scan. An account has at most bucket.MaxTrustedDevices entries, as its
// trust set in the store: past it a new device of the account is not
// recorded (the store still trusts it), so that the minted ids one
// attacker logs in to accounts of his own take no room from the other
// accounts' enrolments. It also records the revocations of the audit
// stream (an admin's trust_revoke, a freed device id's
// attestation_forget), so that no enrolment older than its revocation is
// recorded again (a report read back at start, or delivered again). Safe
// for concurrent use.
type trustRecord struct {
	mu  sync.Mutex
	max int
	m   map[string]trustVal
	// revoked: account "\x00" device, account "\x00" (every device of
	// the account) or "\x00" device (a freed id, in every account) ->
	// the latest revocation; at most max, the oldest dropped first.
	revoked map[string]revocation
	// perAccount counts the enrolments of m by account (the part of
	// their key before "\x00"): at most bucket.MaxTrustedDevices each,
	// as the store keeps (nil until the first).
	perAccount map[string]int
	// evicted counts the enrolments in force dropped for room, or not
	// recorded past their account's bound: riskd does not re-assert them
	// (the store keeps them until they end).
	evicted uint64
	// examined counts the entries (enrolments, revocations) that
	// revocations looked at: their cost, which tests bound.
	examined uint64
	// dirty are the keys of the enrolments due to be journaled (queued
	// set), oldest first; a key dropped meanwhile is skipped (takeDirty).
	dirty []string
}

// trustVal is one recorded enrolment: its end, and the time of the
// login_succeeded that made it (judged against revocations); journaled
// is the end the trust journal holds (zero: none), queued whether it is
// in the record's dirty keys.
type trustVal struct {
	until, at, journaled time.Time
	queued               bool
}

// revocation is one recorded revocation: its time, and the policy's
// attestation.valid_for when riskd read it (the longest a device token
// issued before it can last: tokenRevoked).
type revocation struct {
	ts       time.Time
	validFor time.Duration
}

// tokenProof is the device token a login presented: its expiry and the
// policy's attestation.valid_for when riskd read the login. Zero: no
// token, or a limiter older than Report.TokenExpires.
type tokenProof struct {
	expires  time.Time
	validFor time.Duration
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
	return &TrustRecord{r: trustRecord{max: max, m: map[string]trustVal{}, revoked: map[string]revocation{}}}
}

// set records device as trusted by account until until, enrolled at at
// by a login that presented the device token tok (zero: unknown), a
// later end winning, and reports whether the enrolment stands: false,
// recording nothing, when a revocation recorded covers at (revokedSince)
// or came after tok was issued (tokenRevoked). A new device of an account
// that holds bucket.MaxTrustedDevices entries stands and is not recorded.
func (r *trustRecord) set(account, device string, until, at time.Time, tok tokenProof, now time.Time) bool {
	k := account + "\x00" + device
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.revokedSince(account, device, at) || r.tokenRevoked(k, tok) {
		return false
	}
	old, ok := r.m[k]
	if ok && !r.covered(k, old.at) {
		if until.After(old.until) {
			old.until = until
		}
		if at.After(old.at) {
			old.at = at
		}
		r.m[k] = r.queue(k, old)
		return true
	}
	if ok {
		r.drop(k) // revoked since: this enrolment, after it, replaces it
	}
	if r.perAccount[account] >= bucket.MaxTrustedDevices {
		r.evicted++
		return true // the store trusts it, and bounds the set itself
	}
	if len(r.m) >= r.max {
		r.makeRoom(now)
	}
	r.add(k, account, r.queue(k, trustVal{until: until, at: at}))
	return true
}

// journalStep is how much later than the journaled end an enrolment's
// end must be for it to be journaled again: a device that logs in every
// hour is journaled once a day, not every hour.
const journalStep = 24 * time.Hour

// queue returns v marked queued, its key appended to the dirty keys, if
// nothing is journaled of it or its end is journalStep or more past the
// journaled one; r.mu must be held.
func (r *trustRecord) queue(k string, v trustVal) trustVal {
	if v.queued || !v.journaled.IsZero() && v.until.Before(v.journaled.Add(journalStep)) {
		return v
	}
	v.queued = true
	r.dirty = append(r.dirty, k)
	return v
}

// takeDirty returns at most n of the enrolments due to be journaled,
// oldest first, each now taken for journaled (failed puts it back).
func (r *trustRecord) takeDirty(n int) []trustEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]trustEntry, 0, min(n, len(r.dirty)))
	i := 0
	for ; i < len(r.dirty) && len(out) < n; i++ {
		k := r.dirty[i]
		v, ok := r.m[k]
		if !ok || !v.queued {
			continue // dropped, or taken under an earlier queueing
		}
		v.queued, v.journaled = false, v.until
		r.m[k] = v
		a, d, _ := strings.Cut(k, "\x00")
		out = append(out, trustEntry{account: a, device: d, until: v.until, at: v.at})
	}
	r.dirty = append(r.dirty[:0], r.dirty[i:]...)
	return out
}

// failed queues e again: its journal write failed.
func (r *trustRecord) failed(e trustEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := e.account + "\x00" + e.device
	if v, ok := r.m[k]; ok && v.journaled.Equal(e.until) {
		v.journaled = time.Time{}
		r.m[k] = r.queue(k, v)
	}
}

// journaled marks account's enrolment of device as journaled until until
// (read back from the journal: nothing to write again), and takes back
// the dirty key set just queued for it, so that a start that reads
// 500,000 enrolments leaves no 500,000 keys for the first flush to pass.
func (r *trustRecord) journaled(account, device string, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := account + "\x00" + device
	v, ok := r.m[k]
	if !ok || until.Before(v.until) {
		return
	}
	if n := len(r.dirty); v.queued && n > 0 && r.dirty[n-1] == k {
		r.dirty = r.dirty[:n-1]
	}
	v.journaled, v.queued = until, false
	r.m[k] = v
}

// add records the new enrolment k of account; r.mu must be held.
func (r *trustRecord) add(k, account string, v trustVal) {
	if r.perAccount == nil {
		r.perAccount = map[string]int{}
	}
	r.m[k] = v
	r.perAccount[k[:len(account)]]++ // a part of k: no copy of account
}

// drop forgets the enrolment k (account "\x00" device); r.mu must be
// held.
func (r *trustRecord) drop(k string) {
	if _, ok := r.m[k]; !ok {
		return
	}
	delete(r.m, k)
	a, _, _ := strings.Cut(k, "\x00")
	if n := r.perAccount[a] - 1; n > 0 {
		r.perAccount[a] = n
	} else {
		delete(r.perAccount, a)
	}
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
	return r.covered(account+"\x00"+device, at)
}

// tokenRevoked reports whether a revocation of k (as covered) is
// recorded that the device token tok may have been issued before: the
// token proves the device as it was before the admin disowned it (a
// stolen phone's, the freed id's former holder's), so its logins trust
// nothing however long after the revocation they come; the device
// attests again for a token that does. A token lasts valid_for from its
// issue, and only its expiry is known, so one expiring within valid_for
// of the revocation may be older than it: valid_for as it was when riskd
// read the revocation or as it is now, whichever is longer (a valid_for
// lowered after tokens were issued would otherwise make them look newer
// than they are; a token issued after the revocation under a lowered
// valid_for is refused until its expiry passes that bound, and trusts at
// the device's next renewal after). No skew: a token issued by a host
// behind the revoking one's clock is refused until its renewal, and a
// host ahead lets one issued up to the skew before it by. r.mu must be
// held.
func (r *trustRecord) tokenRevoked(k string, tok tokenProof) bool {
	return !tok.expires.IsZero() && r.anyRevocation(k, func(rev revocation) bool {
		return !tok.expires.After(rev.ts.Add(max(rev.validFor, tok.validFor)))
	})
}

// covered reports whether a revocation recorded of k (anyRevocation)
// covers its enrolment at at: one at or after at - revokeSkew. r.mu must
// be held.
func (r *trustRecord) covered(k string, at time.Time) bool {
	return r.anyRevocation(k, func(rev revocation) bool { return !rev.ts.Add(revokeSkew).Before(at) })
}

// anyRevocation reports whether hit holds for a revocation recorded of
// k (account "\x00" device): of the device by the account, of every
// device of the account, or of the freed id in every account. Its keys
// are parts of k, so a pass over the record allocates nothing; r.mu must
// be held.
func (r *trustRecord) anyRevocation(k string, hit func(revocation) bool) bool {
	if len(r.revoked) == 0 {
		return false
	}
	i := strings.IndexByte(k, 0)
	if i < 0 {
		return false
	}
	for _, rk := range [...]string{k, k[:i+1], k[i:]} {
		if rev, ok := r.revoked[rk]; ok && hit(rev) {
			return true
		}
	}
	return false
}

// revoke records the revocation at ts of device's trust by account
// (account "": by every account, a freed id; device "": of every device of
// the account), read while the policy's attestation.valid_for was
// validFor, which covers the enrolments made at or before ts + revokeSkew
// and the device tokens issued before ts (tokenRevoked). A revocation of
// one device drops its enrolment at once and returns it; a revocation of
// every device of an account or of a freed id looks at no enrolment: those
// it covers are refused by every read of the record (holds, active, set)
// and dropped by its passes (active, makeRoom), so that a breach answered
// with a trust_revoke per account does not cost a pass over the record
// each. Revocations older than horizon (no enrolment they cover is still
// in force) go first when the record of revocations is full, then its
// oldest hundredth.
func (r *trustRecord) revoke(account, device string, ts, horizon time.Time, validFor time.Duration) []trustEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := account + "\x00" + device
	old, ok := r.revoked[k]
	if !ok && len(r.revoked) >= r.max {
		r.pruneRevoked(horizon)
	}
	if !ok || ts.After(old.ts) {
		old.ts = ts
	}
	old.validFor = max(old.validFor, validFor)
	r.revoked[k] = old
	if account == "" || device == "" {
		return nil
	}
	r.examined++
	if v, ok := r.m[k]; ok && !v.at.After(ts.Add(revokeSkew)) {
		r.drop(k)
		return []trustEntry{{account: account, device: device, until: v.until}}
	}
	return nil
}

// pruneRevoked makes room in the record of revocations: it drops those
// older than horizon and, if that freed less than a hundredth of it, the
// oldest until it has. The enrolments a dropped revocation covered are
// dropped first (a pass over the record), so none is trusted again; the
// pass is paid once per hundredth. r.mu must be held.
func (r *trustRecord) pruneRevoked(horizon time.Time) {
	type kt struct {
		k  string
		ts time.Time
	}
	for k, v := range r.m {
		r.examined++
		if r.covered(k, v.at) {
			r.drop(k)
		}
	}
	free := max(r.max/100, 1)
	kept := make([]kt, 0, len(r.revoked))
	for k, rev := range r.revoked {
		r.examined++
		if rev.ts.Before(horizon) {
			delete(r.revoked, k)
			continue
		}
		kept = append(kept, kt{k, rev.ts})
	}
	drop := len(r.revoked) - (r.max - free)
	if drop <= 0 {
		return
	}
	slices.SortFunc(kept, func(a, b kt) int { return a.ts.Compare(b.ts) })
	for _, e := range kept[:drop] {
		delete(r.revoked, e.k)
	}
}

// holds reports whether the record holds account's enrolment of device
// until until (or later).
func (r *trustRecord) holds(account, device string, until time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := account + "\x00" + device
	v, ok := r.m[k]
	return ok && !v.until.Before(until) && !r.covered(k, v.at)
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
		if !v.until.After(now) || r.covered(k, v.at) {
			r.drop(k)
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
		r.drop(e.k)
	}
	r.evicted += uint64(drop)
}

// evictions returns how many enrolments in force were dropped for room.
func (r *trustRecord) evictions() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.evicted
}

// trustEntry is one recorded enrolment (at: its login's time, where
// known).
type trustEntry struct {
	account, device string
	until, at       time.Time
}

// active returns the enrolments in force at now, forgetting the others.
func (r *trustRecord) active(now time.Time) []trustEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]trustEntry, 0, len(r.m))
	for k, v := range r.m {
		if !v.until.After(now) || r.covered(k, v.at) {
			r.drop(k)
			continue
		}
		a, d, _ := strings.Cut(k, "\x00")
		out = append(out, trustEntry{account: a, device: d, until: v.until})
	}
	return out
}

// recordTrust records the enrolments among actions[from:], made by the
// login_succeeded rep, and returns actions less those a revocation
// recorded has revoked: since rep (a report read again, delivered anew or
// read back at start, never trusts a device an admin disowned after it)
// or since the issue of rep's device token (tokenRevoked).
func (d *Daemon) recordTrust(actions []signals.Action, from int, rep *streams.Report) []signals.Action {
	return d.trusts.admit(actions, from, rep, d.o.Policy, d.o.Now)
}

// admit records the enrolments among actions[from:], made by the
// login_succeeded rep, and returns actions less those a revocation
// recorded has revoked (set). pol and now give the policy and the time; a
// report enrols one device at most, so they are called only for it, not
// for every report.
func (r *trustRecord) admit(actions []signals.Action, from int, rep *streams.Report, pol func() *policy.Policy, now func() time.Time) []signals.Action {
	kept := actions[:from]
	for _, a := range actions[from:] {
		if a.Kind == ActionTrust && !r.set(a.ID, a.Lock.Rule, a.Lock.Until, rep.TS, tokenOf(rep, pol()), now()) {
			continue
		}
		kept = append(kept, a)
	}
	return kept
}

// Admit is riskd's judgement of a login's enrolments, for a replay of the
// record (limiter replay): it records those among actions[from:] (the
// TrustAction of the login_succeeded rep) and returns actions less those
// an admin revocation recorded (Revoke) has revoked, as riskd does, under
// the policy p at now.
func (t *TrustRecord) Admit(actions []signals.Action, from int, rep *streams.Report, p *policy.Policy, now time.Time) []signals.Action {
	return t.r.admit(actions, from, rep, func() *policy.Policy { return p }, func() time.Time { return now })
}

// Enrol records account's enrolment of device until until, made by a
// login at at, as riskd reads its trust journal back at start: it reports
// false, recording nothing, when a revocation recorded covers it.
func (t *TrustRecord) Enrol(account, device string, until, at, now time.Time) bool {
	return t.r.set(account, device, until, at, tokenProof{}, now)
}

// Revoke records an admin revocation at ts, as riskd records a
// trust_revoke (account, device; device "": every device of the account)
// or an attestation_forget (account "", device the freed id) of the audit
// stream, under the policy p at now: the enrolments it covers are
// forgotten and the logins it covers (Admit) trust nothing. The store is
// the caller's to update, as the limiter's admin API did.
func (t *TrustRecord) Revoke(account, device string, ts time.Time, p *policy.Policy, now time.Time) {
	t.r.revoke(account, device, ts, now.Add(-TrustFor(p)-revokeSkew), validFor(p))
}

// tokenOf returns the device token rep presented, with p's
// attestation.valid_for (a token lasts as long as the attestation it was
// issued for); zero when rep carries no expiry (no token, or a limiter
// older than Report.TokenExpires).
func tokenOf(rep *streams.Report, p *policy.Policy) tokenProof {
	if rep.TokenExpires.IsZero() {
		return tokenProof{}
	}
	return tokenProof{expires: rep.TokenExpires, validFor: validFor(p)}
}

// validFor is p's attestation.valid_for, or its default.
func validFor(p *policy.Policy) time.Duration {
	if a := p.Risk.Attestation; a != nil && a.ValidFor > 0 {
		return a.ValidFor
	}
	return policy.DefaultAttestationValidFor
}

// revokeTrust applies a trust revocation of the audit stream (Audit's
// trust_revoke, or attestation_forget with account ""): the record drops
// the enrolments it revokes and, live, the store loses them again, in
// case a re-assertion wrote one back after the limiter's revocation (of
// every device, or of a freed id: all of them, so an enrolment made over
// a minute after the revocation but written before riskd read it goes
// too, until the device's next login). An enrolment made after the
// revocation is kept in the record. d.execMu held.
func (d *Daemon) revokeTrust(ctx context.Context, account, device string, ts time.Time, live bool) {
	now := d.o.Now()
	dropped := d.trusts.revoke(account, device, ts, now.Add(-d.trustFor()-revokeSkew), validFor(d.o.Policy()))
	if !live {
		return
	}
	for _, e := range dropped {
		if _, err := d.o.Store.Untrust(ctx, bucket.Subject{Kind: "account", ID: e.account}, e.device); err != nil {
			d.count("store")
		}
	}
	// a revocation of every device, or of a freed id, drops nothing at
	// once (revoke): the store loses them all again instead, one call
	var err error
	switch {
	case account == "":
		_, err = d.o.Store.UntrustDevice(ctx, device)
	case device == "":
		_, err = d.o.Store.Untrust(ctx, bucket.Subject{Kind: "account", ID: account}, "")
	}
	if err != nil {
		d.count("store")
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
				acts = d.recordTrust(TrustAction(&r, d.trustFor(), acts[:0]), 0, &r)
			}
		})
	if err != nil {
		return fmt.Errorf("risk: trust record: %w", err)
	}
	d.log.Info("trust record read", "reports", n)
	return nil
}

// scanTrust seeds the trust record from the store's own trust sets
// (Options.TrustScanner), so that it covers every enrolment in force and
// not only those whose login the events stream still holds (48 h, where
// trust lasts 30 days): a Redis that restarts empty after riskd started
// gets them all back. Each enrolment's time is taken as its end less
// trustFor, for the revocations it is judged against. It runs before
// riskd is ready, like readTrust: a scan in the background would race the
// very Redis loss it is for, and a Redis that is down blocks riskd's
// writes (and its lease) anyway; SCAN reads a thousand keys a round trip.
// A failed scan is logged, counted (errors_total{op="trust_scan"}) and
// retried, never taken for a complete record; what it read stays
// recorded.
func (d *Daemon) scanTrust(ctx context.Context) error {
	sc := d.o.TrustScanner
	if sc == nil {
		sc, _ = d.o.Store.(bucket.TrustScanner)
	}
	if sc == nil {
		return nil
	}
	for failures := 1; ; failures++ {
		n, err := d.scanTrustOnce(ctx, sc)
		switch {
		case err == nil:
			d.log.Info("trust record scanned", "enrolments", n)
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("risk: trust scan: %w", ctx.Err())
		case !d.Leading():
			return ErrNotLeading
		}
		d.count("trust_scan")
		d.log.Warn("trust scan failed; retrying (riskd acts only once its state is rebuilt)",
			"read", n, "failures", failures, "err", err)
		_ = sleepCtx(ctx, min(time.Duration(failures)*100*time.Millisecond, time.Second))
	}
}

// scanTrustOnce records every enrolment sc passes and returns how many it
// recorded (a revoked one is not).
func (d *Daemon) scanTrustOnce(ctx context.Context, sc bucket.TrustScanner) (int, error) {
	now, trustFor, n := d.o.Now(), d.trustFor(), 0
	err := sc.ScanTrust(ctx, func(account, device string, until time.Time) error {
		if d.trusts.set(account, device, until, until.Add(-trustFor), tokenProof{}, now) {
			n++
		}
		return nil
	})
	return n, err
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
