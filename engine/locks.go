package engine

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
)

// Locks on every subject kind (CONTRACT 7.1): a decision checks the lock
// keys of the subject kinds the policy's lock rules cover on its class
// (policy.LockParts), and a lock in force answers unless the rule that set
// it is not enforced on that class; an allow list never exempts from one.

// lockPlan holds, for one policy, the subject kinds whose locks each class
// checks (by class index) and, parallel to them, the class-restricted lock
// rules whose own lock keys the class checks besides the subject's
// (policy.OwnLockRules; all nil for a policy without such rules).
type lockPlan struct {
	p     *policy.Policy
	parts [][]policy.KeyPart
	own   [][][]string
}

// lockPartsOf returns the lock subject kinds of class ci under p and the
// own-key lock rules of each, computed once per policy.
func (e *Engine) lockPartsOf(p *policy.Policy, ci int) ([]policy.KeyPart, [][]string) {
	lp := e.lockPlan.Load()
	if lp == nil || lp.p != p {
		lp = &lockPlan{p: p, parts: make([][]policy.KeyPart, len(p.Classes)), own: make([][][]string, len(p.Classes))}
		for c := range p.Classes {
			lp.parts[c] = p.LockParts(c)
			var own [][]string
			for i, part := range lp.parts[c] {
				if rules := p.OwnLockRules(c, part); len(rules) > 0 {
					if own == nil {
						own = make([][]string, len(lp.parts[c]))
					}
					own[i] = rules
				}
			}
			lp.own[c] = own
		}
		e.lockPlan.Store(lp)
	}
	if ci < 0 || ci >= len(lp.parts) {
		return nil, nil
	}
	return lp.parts[ci], lp.own[ci]
}

// appendLocks appends the lock keys of the request's subjects that class
// ci checks (account first, with the account's trust set for a proven
// device: exempt_attested locks spare it): for each subject its lock key,
// then the own lock key of each class-restricted lock rule of the class
// keyed by it. An IPv6 client's ip locks are its prefix's (IPKey, as
// riskd counts and writes them, 7.1), then, while an upgrade's last
// locks last, its whole address's (the previous release wrote those;
// an IPv4 client has one id, so no key more). It reports whether it
// appended any.
func (e *Engine) appendLocks(p *policy.Policy, ci int, in *Input, d *Decision, verifiedDevice bool) bool {
	locks := false
	parts, own := e.lockPartsOf(p, ci)
	for i, part := range parts {
		id := value(in, part, "")
		if id == "" {
			continue
		}
		var rules []string
		if own != nil {
			rules = own[i]
		}
		kind := subjectKinds[part]
		e.appendSubjectLocks(d, kind, id, rules, part == policy.PartAccount && verifiedDevice)
		if part == policy.PartIP && id != in.IP && in.IP != "" {
			// whole-address locks of the previous release (docs/operations.md,
			// upgrading): they end within their rule's duration
			e.appendSubjectLocks(d, kind, in.IP, rules, false)
		}
		if part == policy.PartDevice && !verifiedDevice {
			// a token-less claim of the id is bound by the locks riskd
			// computed from claims too (7.1: signals count claims apart),
			// which never touch the proven device
			e.appendSubjectLocks(d, ClaimSubject, id, rules, false)
		}
		locks = true
	}
	return locks
}

// appendSubjectLocks appends the lock key of (kind, id) and the own lock
// key of each of rules, each followed by the subject's trust set when
// trust is set.
func (e *Engine) appendSubjectLocks(d *Decision, kind, id string, rules []string, trust bool) {
	for i := -1; i < len(rules); i++ {
		if i < 0 {
			d.keybuf = bucket.AppendLockKey(d.keybuf, e.o.Prefix, kind, id)
		} else {
			d.keybuf = bucket.AppendRuleLockKey(d.keybuf, e.o.Prefix, kind, id, rules[i])
		}
		d.spans = append(d.spans, span{len(d.keybuf), spanLock})
		if trust {
			d.keybuf = bucket.AppendTrustKey(d.keybuf, e.o.Prefix, kind, id)
			d.spans = append(d.spans, span{len(d.keybuf), spanTrust})
		}
	}
}

// lockScope returns the subject kind of a lock key (prefix + "{kind:id}:l",
// or a rule's own "{kind:id}:l:RULE").
func lockScope(prefix, key string) string {
	rest := strings.TrimPrefix(strings.TrimPrefix(key, prefix), "{")
	kind, _, _ := strings.Cut(rest, ":")
	if kind == ClaimSubject {
		return "device" // apps handle the device scope; a claim is a device id as sent
	}
	return kind
}

// foreignLock reports whether d is Locked or StepUp by a lock whose rule is
// not enforced on class ci; it then drops that lock from req and resets
// d's lock, so that the decision can be asked again without it (the store
// wrote nothing: a lock answers before any bucket is taken from).
func foreignLock(p *policy.Policy, ci int, d *Decision, req *bucket.Request) bool {
	if d.Outcome != Locked && d.Outcome != StepUp || p.LockApplies(d.Lock.Rule, ci) {
		return false
	}
	i := d.bres.LockIndex
	if i < 0 || i >= len(req.Locks) {
		return false
	}
	req.Locks = append(req.Locks[:i], req.Locks[i+1:]...)
	if i < len(req.TrustKeys) {
		req.TrustKeys = append(req.TrustKeys[:i], req.TrustKeys[i+1:]...)
	}
	d.Outcome, d.Lock, d.LockScope, d.RetryAfter, d.fromL1 = Allowed, bucket.Lock{}, "", 0, false
	return true
}

// allowListLocks decides the locks of a request on an allow list (7.1: no
// allow list exempts from a lockout or step-up). It reports whether one is
// in force (d is then Locked or StepUp); otherwise, and when the store
// cannot answer, d keeps its AllowedList outcome: the list exempts the
// request from every limit, so a store failure denies nothing.
func (e *Engine) allowListLocks(ctx context.Context, p *policy.Policy, ci int, in *Input, d *Decision, verifiedDevice bool, start time.Time) bool {
	req := e.request(d, in, verifiedDevice, start)
	if !e.appendLocks(p, ci, in, d, verifiedDevice) {
		return false
	}
	handOutKeys(d, req, e.borrowKeys)
	list := d.List
	for len(req.Locks) > 0 {
		if e.o.L1 != nil && e.fromL1(p, ci, d, req, start) {
			return true
		}
		bc, allowed := e.o.Breaker.Allow()
		if !allowed {
			break
		}
		err := e.o.Store.Decide(ctx, req, &d.bres)
		if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			e.o.Breaker.Abandon(bc)
			break
		}
		e.o.Breaker.Done(bc, err == nil || errors.Is(err, bucket.ErrBadRequest))
		if err != nil || !d.bres.Locked {
			break
		}
		e.conclude(d)
		if foreignLock(p, ci, d, req) {
			continue
		}
		if e.o.L1 != nil {
			e.toL1(d, req, start)
		}
		return true
	}
	d.Outcome, d.List, d.Lock, d.LockScope, d.RetryAfter = AllowedList, list, bucket.Lock{}, "", 0
	return false
}
