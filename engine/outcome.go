package engine

import (
	"math"
	"time"

	"github.com/tollgate-dev/tollgate/policy"
)

// conclude picks the outcome and binding limit from the store's result.
func (e *Engine) conclude(d *Decision) {
	r := &d.bres
	d.Now = r.Now
	if r.Locked {
		d.Lock = r.Lock
		if r.LockIndex >= 0 && r.LockIndex < len(d.breq.Locks) {
			d.LockScope = lockScope(e.o.Prefix, d.breq.Locks[r.LockIndex])
		}
		d.RetryAfter = r.Lock.Until.Sub(r.Now)
		if r.Lock.Kind == "step_up" {
			d.Outcome = StepUp
		} else {
			d.Outcome = Locked
		}
		return
	}
	bi := -1
	if r.Allowed {
		d.Outcome = Allowed
		best := math.Inf(1)
		for i, l := range d.applied {
			if l.Shadow {
				continue
			}
			lr := &r.Limits[i]
			ratio := 0.0
			if lr.Burst > 0 {
				ratio = lr.Remaining / lr.Burst
			}
			if ratio < best {
				best, bi = ratio, i
			}
		}
	} else {
		d.Outcome = Limited
		var longest time.Duration = -1
		for i, l := range d.applied {
			lr := &r.Limits[i]
			if l.Shadow || lr.Allowed {
				continue
			}
			if lr.RetryAfter > longest {
				longest, bi = lr.RetryAfter, i
			}
		}
		d.RetryAfter = longest
	}
	if bi < 0 {
		return
	}
	lr := &r.Limits[bi]
	d.Binding = d.applied[bi]
	d.Limit = int64(math.Floor(lr.Burst + 1e-9))
	d.Remaining = int64(math.Floor(lr.Remaining + 1e-9))
	d.Reset = lr.Reset
	d.Window = windowOf(d.Binding, d.Now)
}

// fail applies the failure mode of the applicable limits to a store error.
func (e *Engine) fail(d *Decision, p *policy.Policy, ci int, err error, start time.Time) {
	d.Now, d.Err = start, err
	d.Outcome = Degraded
	for _, l := range d.applied {
		if !l.Shadow && p.FailureModeOf(l, ci) == policy.FailClosed {
			d.Outcome = Unavailable
			d.RetryAfter = e.o.UnavailableRetry
			break
		}
	}
	// Degraded answers carry the nominal numbers of the tightest limit.
	for _, l := range d.applied {
		if l.Shadow {
			continue
		}
		if d.Binding == nil || l.Burst < d.Binding.Burst {
			d.Binding = l
		}
	}
	if d.Binding != nil {
		d.Limit = int64(d.Binding.Burst)
		d.Remaining = d.Limit
		d.Reset = start
		d.Window = windowOf(d.Binding, start)
	}
}

// record updates the metrics for d.
func (e *Engine) record(d *Decision, p *policy.Policy, start time.Time) {
	m := e.o.Metrics
	if m == nil {
		return
	}
	m.Seconds.Observe(e.o.Clock().Sub(start).Seconds())
	if d.fromL1 {
		m.L1Hits.Inc()
	}
	switch d.Outcome {
	case Locked, StepUp:
		m.Decisions.WithLabelValues(d.Lock.Rule, d.Class, d.Outcome.String()).Inc()
		return
	case AllowedList, DeniedList:
		m.Decisions.WithLabelValues(d.List.Name, d.Class, d.Outcome.String()).Inc()
		return
	case Unavailable, Degraded:
		result := d.Outcome.String()
		if d.abandoned {
			result = ResultAbandoned
		}
		for _, l := range d.applied {
			m.Decisions.WithLabelValues(l.Name, d.Class, result).Inc()
		}
		return
	}
	if len(d.applied) == 0 {
		m.Decisions.WithLabelValues("none", d.Class, ResultAllowed).Inc()
		return
	}
	if d.fromL1 {
		m.Decisions.WithLabelValues(d.Binding.Name, d.Class, ResultLimited).Inc()
		m.Kinds.WithLabelValues(d.Binding.Kind.String(), ResultLimited).Inc()
		return
	}
	for i, l := range d.applied {
		lr := &d.bres.Limits[i]
		o := e.limitObs(p, l, d.Class)
		switch {
		case !lr.Allowed && l.Shadow:
			o.shadowLimited.Inc()
			o.kindShadow.Inc()
		case !lr.Allowed:
			o.limited.Inc()
			o.kindLimited.Inc()
		default:
			o.allowed.Inc()
			o.kindAllowed.Inc()
			if o.leased != nil && d.lease != "" {
				o.leased.Inc()
			}
		}
		if !l.Shadow && lr.Burst > 0 {
			o.remaining.Observe(lr.Remaining / lr.Burst)
		}
	}
}
