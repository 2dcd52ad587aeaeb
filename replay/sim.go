package replay

import (
	"context"
	"net/netip"
	"time"

	"github.com/tollgate-dev/tollgate/api"
	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/reputation"
	"github.com/tollgate-dev/tollgate/risk"
	"github.com/tollgate-dev/tollgate/signals"
	"github.com/tollgate-dev/tollgate/streams"
)

// sweepEvery is how much event time passes between sweeps of the memory
// store (the limiter sweeps it every 10 s of wall time; sweeps change no
// decision, they only free memory).
const sweepEvery = int64(time.Minute)

// sim re-runs the record under one policy: the limiter's engine over a
// memory store whose clock is the event time, and the risk engine fed with
// the decisions that engine makes and the recorded reports, its locks and
// multipliers written to the same store (risk.WriteAction, as riskd does).
// It is not safe for concurrent use.
type sim struct {
	pol   *policy.Policy
	store *bucket.MemoryStore
	eng   *engine.Engine
	sig   *signals.Engine
	// trust is riskd's record of trusted devices and their revocations
	// (Audit): a login whose device an admin disowned trusts nothing.
	trust *risk.TrustRecord
	// now is the event clock: the time of the event being replayed.
	now time.Time

	in   engine.Input
	d    engine.Decision
	ev   streams.Decision
	acts []signals.Action

	nextSweep int64
	maxKeys   int
	full      bool // the store reached its bound (evictions make results approximate)

	// onMeasure is called for every alert the risk engine raises (kind
	// lockout, step_up, tighten, block, anomaly or repeat_offender).
	onMeasure func(a *streams.Alert)
}

// simOptions bound a sim's state.
type simOptions struct {
	// MaxKeys bounds the memory store's buckets (as --memory-max-keys).
	MaxKeys int
	// SignalKeys bounds each risk-engine structure (as riskd's MaxKeys).
	SignalKeys int
}

// newSim returns a sim for p; rules are p's reputation rules (nil: none).
func newSim(p *policy.Policy, rules *reputation.Rules, o simOptions) (*sim, error) {
	s := &sim{pol: p, maxKeys: o.MaxKeys, trust: risk.NewTrustRecord(o.SignalKeys)}
	clock := func() time.Time { return s.now }
	// the sim is the store's only user (the risk engine's actions go
	// through it too), one event at a time
	s.store = bucket.NewSingleGoroutineMemoryStore(bucket.MemoryOptions{MaxKeys: o.MaxKeys, Now: clock})
	eo := engine.Options{Store: s.store, Policy: func() *policy.Policy { return p }, Prefix: keyPrefix, Clock: clock}
	if rules != nil {
		eo.Reputation = func() *reputation.Rules { return rules }
	}
	eng, err := engine.New(eo)
	if err != nil {
		return nil, err
	}
	s.eng = eng
	s.sig = signals.NewSingleGoroutine(signals.Options{Risk: p.Risk, Limits: p.Limits, IPv6Prefix: p.Identity.IPv6Prefix, MaxKeys: o.SignalKeys})
	return s, nil
}

// keyPrefix is the store prefix of the replay's private stores.
const keyPrefix = bucket.DefaultPrefix

// tick moves the event clock to ts and sweeps the store when due.
func (s *sim) tick(ts time.Time) {
	s.now = ts
	ns := ts.UnixNano()
	if ns < s.nextSweep {
		return
	}
	if s.nextSweep != 0 {
		s.store.Sweep(ts)
		if s.store.Len() >= s.maxKeys*9/10 {
			s.full = true
		}
	}
	s.nextSweep = ns + sweepEvery
}

// decide re-runs the recorded decision rec, whose IP parsed is addr
// (invalid: unparsable); the outcome is in s.d. It
// returns false when rec cannot be evaluated (no "METHOD /path" endpoint).
func (s *sim) decide(rec *streams.Decision, addr netip.Addr) bool {
	s.tick(rec.TS)
	// field by field: a literal would be built on the stack and copied
	in := &s.in
	*in = engine.Input{}
	in.Endpoint, in.IP, in.UserID, in.DeviceID = rec.Endpoint, rec.IP, rec.UserID, rec.DeviceID
	in.Account, in.ASN, in.Cost, in.Now, in.Addr, in.Attributes = rec.Account, rec.ASN, rec.Cost, rec.TS, addr, rec.Attributes
	in.DeviceVerified = rec.DeviceVerified // the record says whether the request proved its device (6.3)
	in.AttestationBudget = rec.AttestationBudget
	if s.in.Cost < 0 {
		s.in.Cost = 1
	}
	if err := s.eng.Decide(context.Background(), &s.in, &s.d); err != nil {
		return false
	}
	if id := s.d.LeaseID(); id != "" {
		// the record does not say when a request ended: its concurrency
		// slots are freed at once (docs/tuning.md)
		_, _ = s.eng.Release(context.Background(), id)
	}
	api.DecisionEvent(&s.ev, rec.RequestID, &s.in, &s.d)
	s.acts = s.sig.ApplyDecision(0, 0, &s.ev, s.acts[:0])
	s.execute()
	return true
}

// report feeds the recorded report r to the risk engine, and its
// enrolment of a trusted device to the trust record, as riskd does.
func (s *sim) report(r *streams.Report) {
	s.tick(r.TS)
	s.acts = s.sig.ApplyReport(0, 0, r, s.acts[:0])
	n := len(s.acts)
	s.acts = risk.TrustAction(r, risk.TrustFor(s.pol), s.acts)
	if len(s.acts) > n {
		s.acts = s.trust.Admit(s.acts, n, r, s.pol, s.now)
	}
	s.execute()
}

// execute applies the risk engine's actions to the store and counts its
// alerts: every lockout, step-up, tighten and anomaly measure it sets comes
// with one, and so does every firing of a shadow rule.
func (s *sim) execute() {
	for i := range s.acts {
		a := &s.acts[i]
		if a.Kind == signals.Alert {
			s.onMeasure(&a.Alert)
			continue
		}
		_ = risk.WriteAction(context.Background(), s.store, s.pol, a)
	}
}
