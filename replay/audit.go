package replay

import (
	"context"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/streams"
)

// DefaultMaxAdminChanges bounds the admin changes a replay holds: the
// newest are kept (see collectAudits).
const DefaultMaxAdminChanges = 100_000

// collectAudits reads the ordered chunks of the audit stream from ch until
// it is closed and returns the newest max of them, oldest first, and how
// many older ones it dropped. The audit stream is read whole before the
// replay starts (every change in it may be in force during the range), so
// it is bounded: a script that revoked the trust of a million accounts
// must not hold a million events, and the oldest changes are the least
// likely to still be in force.
func collectAudits(ch <-chan []event, max int) (evs []event, dropped int64) {
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
