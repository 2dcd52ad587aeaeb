package engine

import (
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
)

// fromL1 answers d from the L1 cache when a lock or an empty bucket of
// this request is known; it reports whether it did.
func (e *Engine) fromL1(p *policy.Policy, ci int, d *Decision, req *bucket.Request, now time.Time) bool {
	c := e.o.L1
	if !c.denials(now) {
		return false
	}
	for i, k := range req.Locks {
		if req.Device != "" && i < len(req.TrustKeys) && req.TrustKeys[i] != "" {
			// A proven device may be in this lock's trust set: only the
			// store knows, so a cached lock never answers for it (it
			// would deny a request the store exempts).
			continue
		}
		if en, ok := c.get(k, now); ok && p.LockApplies(en.lock.Rule, ci) {
			d.Outcome, d.Lock, d.LockScope, d.Now = Locked, en.lock, en.scope, now
			if en.lock.Kind == "step_up" {
				d.Outcome = StepUp
			}
			d.RetryAfter = en.lock.Until.Sub(now)
			d.fromL1 = true
			return true
		}
	}
	var longest time.Duration
	bi := -1
	var hit l1Entry
	for i := range req.Limits {
		if req.Limits[i].Shadow || req.Limits[i].OwnKey != "" {
			// a limit with an own bucket: only the store knows which
			// bucket this request takes from (7.1)
			continue
		}
		en, ok := c.get(req.Limits[i].Key, now)
		if !ok || req.Cost != en.cost {
			// a smaller cost may pass; a larger one waits longer than the
			// store said for this one: only the store knows how long
			continue
		}
		if w := en.retry.Sub(now); w > longest || bi < 0 {
			longest, bi, hit = w, i, en
		}
	}
	if bi < 0 {
		return false
	}
	d.Outcome, d.Now, d.RetryAfter = Limited, now, longest
	d.Binding = d.applied[bi]
	d.Limit = int64(hit.burst + 1e-9)
	d.Remaining = 0
	d.Reset = hit.reset
	d.Window = windowOf(d.Binding, now)
	d.fromL1 = true
	return true
}

// subjectsFromL1 marks the subjects whose multipliers the L1 cache knows,
// so the store does not read them.
func (e *Engine) subjectsFromL1(req *bucket.Request, now time.Time) {
	c := e.o.L1
	ns := monoNS(now)
	for j := range req.Subjects {
		sub := &req.Subjects[j]
		en, ok := c.getSubject(sub.Key, ns)
		if ok && en.static == sub.Static && en.unverified == sub.Unverified {
			sub.Cached, sub.Mult, sub.Pen = true, en.mult, en.pen
		}
	}
}

// toL1 remembers a store answer that will hold: empty buckets until their
// retry time, locks and subjects' multipliers for the TTL.
func (e *Engine) toL1(d *Decision, req *bucket.Request, now time.Time) {
	c := e.o.L1
	for j, sr := range d.bres.Subjects {
		if sr.Read && j < len(req.Subjects) && !c.noSubjects {
			sub := &req.Subjects[j]
			c.putSubject(sub.Key, l1Subject{until: monoNS(now) + int64(c.ttl), mult: sr.Mult, pen: sr.Pen, static: sub.Static, unverified: sub.Unverified}, monoNS(now))
		}
	}
	switch d.Outcome {
	case Locked, StepUp:
		until := now.Add(min(c.ttl, d.RetryAfter))
		c.put(req.Locks[d.bres.LockIndex], l1Entry{until: until, lock: d.Lock, scope: d.LockScope}, now)
	case Limited:
		for i := range req.Limits {
			lr := &d.bres.Limits[i]
			if req.Limits[i].Shadow || lr.Allowed || lr.RetryAfter <= 0 || d.bres.Trusted && req.Limits[i].OwnKey != "" ||
				req.Limits[i].Kind == bucket.KindConcurrency {
				continue
			}
			// Local time plus the store's wait: the store's clock (Redis
			// TIME) and ours differ only by the round trip.
			c.put(req.Limits[i].Key, l1Entry{until: now.Add(min(c.ttl, lr.RetryAfter)), cost: req.Cost, retry: now.Add(lr.RetryAfter),
				burst: lr.Burst, reset: lr.Reset}, now)
		}
	}
}
