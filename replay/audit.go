package replay

import (
	"context"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/streams"
)

// DefaultMaxAdminChanges bounds the admin changes a replay holds: the
// newest are kept (see collectAudits).
const DefaultMaxAdminChanges = 100_000

// collectWhole reads the ordered chunks of a stream read whole (the audit
// stream, riskd's trust journal) from ch until it is closed and returns
// the newest max of them, oldest first, and how many older ones it
// dropped. Such a stream is read whole before the replay starts (every
// change in it may be in force during the range), so it is bounded: a
// script that revoked the trust of a million accounts must not hold a
// million events, and the oldest changes are the least likely to still be
// in force.
func collectWhole(ch <-chan []event, max int) (evs []event, dropped int64) {
	for c := range ch {
		evs = append(evs, c...)
		if len(evs) >= 2*max {
			n := len(evs) - max
			dropped += int64(n)
			evs = append(evs[:0], evs[n:]...)
		}
	}
	if len(evs) > max {
		n := len(evs) - max
		dropped += int64(n)
		evs = evs[n:]
	}
	return evs, dropped
}

// Audit applies one admin change of the audit stream to both policies'
// state at its time, as the limiter's admin API and riskd applied it
// live: a multiplier set or cleared by hand, a lockout lifted (riskd
// resets the subject's counts and never sets the lock again), a device's
// trust revoked, an attestation forgotten (its id is trusted by no
// account). Changes riskd would not apply (no time, no id) are skipped.
// Call it in event-time order with Decision and Report: a change applies
// before the events of its time.
func (r *Replayer) Audit(a *streams.Audit) {
	if _, ok := eventNs(a.TS); !ok || a.ID == "" {
		r.t.skipped++
		return
	}
	r.sims[base].audit(a)
	r.sims[cand].audit(a)
	r.t.admin++
}

// seedTrust makes the journaled enrolments of evs (riskd's trust
// journal, streams.TrustStream) that were in force at start (made before
// it, ending after it) trusted devices of both policies' sims at start:
// riskd held them when the range began, where the replayed reports know
// only the logins of the warm-up. Call it once, when the replay starts,
// after the admin changes before start. An enrolment the journal shows
// made after start is not seeded (the journal keeps the latest login per
// device only: an earlier one is unknown); the reports enrol it when its
// login is in the range.
func (r *Replayer) seedTrust(evs []event, start int64) {
	at := time.Unix(0, start)
	for i := range evs {
		e := evs[i].e
		if evs[i].ns >= start || !e.Until.After(at) {
			continue
		}
		r.sims[base].enrol(e, at)
		r.sims[cand].enrol(e, at)
		r.t.seeded++
	}
}

// enrol makes e a trusted device of its account at now, in the trust
// record and the store, unless a revocation recorded covers it.
func (s *sim) enrol(e *streams.TrustEnrolment, now time.Time) {
	s.tick(now)
	if s.trust.Enrol(e.Account, e.Device, e.Until, e.At, now) {
		_ = s.store.Trust(context.Background(), bucket.Subject{Kind: "account", ID: e.Account}, e.Device, e.Until)
	}
}

// audit applies the admin change a to the sim's store, risk engine and
// trust record (Replayer.Audit). The store is changed as the limiter's
// admin API changed it (api/admin.go, admin_trust.go, admin_attest.go),
// the risk engine and the trust record as riskd's applyAudit does.
func (s *sim) audit(a *streams.Audit) {
	s.tick(a.TS)
	ctx := context.Background()
	subj := bucket.Subject{Kind: a.Subject, ID: a.ID}
	switch a.Action {
	case streams.AuditMultiplierSet:
		if a.Value == nil {
			return
		}
		m := bucket.Multiplier{Source: "admin", Value: *a.Value, Reason: a.Reason}
		if a.ExpiresAt != nil {
			m.ExpiresAt = *a.ExpiresAt
		}
		_ = s.store.SetMultiplier(ctx, subj, m)
	case streams.AuditMultiplierClear:
		_ = s.store.ClearMultiplier(ctx, subj, "admin")
	case streams.AuditLockoutLift:
		if subj.Kind == "" {
			subj.Kind = "account" // audit events of builds before 7.1
		}
		s.sig.LiftSubjectLock(subj.Kind, a.ID, a.TS)
		for _, kind := range bucket.LockKinds(subj.Kind) {
			_, _ = s.store.ClearLock(ctx, bucket.Subject{Kind: kind, ID: a.ID})
		}
	case streams.AuditTrustRevoke:
		s.trust.Revoke(a.ID, a.DeviceID, a.TS, s.pol, s.now)
		_, _ = s.store.Untrust(ctx, bucket.Subject{Kind: "account", ID: a.ID}, a.DeviceID)
	case streams.AuditAttestationForget:
		s.trust.Revoke("", a.ID, a.TS, s.pol, s.now)
		_, _ = s.store.UntrustDevice(ctx, a.ID)
	}
}
