package policy

import (
	"strings"

	"go.yaml.in/yaml/v3"
)

// Velocity rules beyond logins (CONTRACT 7.1, 7.4): any event type, any
// subject or attribute, lockouts and step-ups on every subject kind, on
// the route classes a rule names.

// Actions of velocity rules.
const (
	ActionLockout = "lockout"
	ActionStepUp  = "step_up"
	ActionTighten = "tighten"
	// ActionBlock is tighten with multiplier 0.
	ActionBlock = "block"
)

// LockClass is the route class a lockout or step-up rule is enforced on
// when it names no `classes`.
const LockClass = "auth"

// MaxEventType bounds the length of a reported event type.
const MaxEventType = 64

// ValidEventType reports whether s is an event type: [a-z][a-z0-9_]{0,63}.
func ValidEventType(s string) bool {
	if len(s) == 0 || len(s) > MaxEventType || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// EventOther is the metric label of a reported event type that is neither
// built in nor counted by a velocity rule of the policy.
const EventOther = "other"

// EventLabel returns the metric label of reported event type t: t itself
// when it is built in (login_failed, login_succeeded, step_up_passed) or
// counted by one of p's velocity rules, else EventOther. Any string is a
// valid type (7.4), so a label per type would let a client mint series;
// the policy's types are bounded by the policy (p may be nil).
func (p *Policy) EventLabel(t string) string {
	switch t {
	case "login_failed", "login_succeeded", "step_up_passed":
		return t
	}
	if p != nil {
		for i := range p.Risk.Velocity {
			if p.Risk.Velocity[i].Event == t {
				return t
			}
		}
	}
	return EventOther
}

// IsLock reports whether the rule sets a lock (lockout or step_up).
func (r *VelocityRule) IsLock() bool { return r.Action == ActionLockout || r.Action == ActionStepUp }

// Subject returns the subject kind the rule counts and acts on, as alerts,
// multipliers and the admin API spell it: "account", "ip", ..., or
// "attr:NAME".
func (r *VelocityRule) Subject() string {
	if r.By == PartAttr {
		return "attr:" + r.ByAttr
	}
	return r.By.String()
}

// LockClasses returns the classes a lock rule is enforced on: its
// `classes`, else LockClass.
func (r *VelocityRule) LockClasses() []string {
	if len(r.Classes) > 0 {
		return r.Classes
	}
	return []string{LockClass}
}

// lockParts are the subject kinds a lock may be on, in the order a
// decision checks them.
var lockParts = [...]KeyPart{PartAccount, PartIP, PartUser, PartDevice}

// LockParts returns the subject kinds whose locks a decision on class
// classIndex checks, in check order (account first): on LockClass always
// account and ip (locks set under an earlier policy, re-asserted by
// riskd), plus the subject of every lock rule enforced on the class.
func (p *Policy) LockParts(classIndex int) []KeyPart {
	if classIndex < 0 || classIndex >= len(p.Classes) {
		return nil
	}
	class := p.Classes[classIndex]
	var want [PartAttr + 1]bool
	if class == LockClass {
		want[PartAccount], want[PartIP] = true, true
	}
	for i := range p.Risk.Velocity {
		r := &p.Risk.Velocity[i]
		if r.IsLock() && contains(r.LockClasses(), class) {
			want[r.By] = true
		}
	}
	var out []KeyPart
	for _, part := range lockParts {
		if want[part] {
			out = append(out, part)
		}
	}
	return out
}

// OwnLock reports whether the rule's locks are kept apart, each subject's
// under a lock key of the rule's own (bucket.RuleLockKey): a lockout or
// step-up rule restricted to route classes (`classes`), so that one
// class's lock never replaces another's. Other locks share the subject's
// lock key.
func (r *VelocityRule) OwnLock() bool { return r.IsLock() && len(r.Classes) > 0 }

// OwnLockRules returns the names of the OwnLock rules keyed by part that
// are enforced on class classIndex, in policy order: a decision on the
// class checks their lock keys besides the subject's (none for a policy
// without such rules).
func (p *Policy) OwnLockRules(classIndex int, part KeyPart) []string {
	if classIndex < 0 || classIndex >= len(p.Classes) {
		return nil
	}
	class := p.Classes[classIndex]
	var out []string
	for i := range p.Risk.Velocity {
		r := &p.Risk.Velocity[i]
		if r.OwnLock() && r.By == part && contains(r.Classes, class) {
			out = append(out, r.Name)
		}
	}
	return out
}

// LockApplies reports whether a lock set by the velocity rule named rule
// is enforced on class classIndex: on the rule's classes, or on LockClass
// when the policy has no such rule (a lock of an earlier policy).
func (p *Policy) LockApplies(rule string, classIndex int) bool {
	if classIndex < 0 || classIndex >= len(p.Classes) {
		return false
	}
	class := p.Classes[classIndex]
	for i := range p.Risk.Velocity {
		if r := &p.Risk.Velocity[i]; r.Name == rule && r.IsLock() {
			return contains(r.LockClasses(), class)
		}
	}
	return class == LockClass
}

// velocityEvent parses a velocity rule's `event`.
func (ps *parser) velocityEvent(g field) (string, bool) {
	s, ok := ps.scalar(g.val, g.name)
	if ok && !ValidEventType(s) {
		ps.errorf(g.val, "event %q: want an event type of 1-%d characters [a-z][a-z0-9_]", s, MaxEventType)
		ok = false
	}
	return s, ok
}

// velocityBy parses a velocity rule's `by`: a subject or attr:NAME.
func (ps *parser) velocityBy(g field, rule *VelocityRule) bool {
	s, ok := ps.scalar(g.val, g.name)
	if !ok {
		return false
	}
	if name, isAttr := strings.CutPrefix(s, "attr:"); isAttr {
		if !ValidAttrName(name) {
			ps.errorf(g.val, "by %q: attribute name %q: want 1-%d characters of a-z 0-9 _", s, name, MaxAttrName)
			return false
		}
		rule.By, rule.ByAttr = PartAttr, name
		return true
	}
	if part, known := keyPartOf(s); known && part.IsSubject() {
		rule.By = part
		return true
	}
	ps.errorf(g.val, "by %q: want account, ip, user, device, asn or attr:NAME", s)
	return false
}

// velocityClasses parses a velocity rule's `classes`.
func (ps *parser) velocityClasses(g field, rule *VelocityRule) bool {
	l, ok := ps.nonEmptyList(g)
	for _, n := range l {
		s, good := ps.scalar(n, "classes")
		if !good {
			ok = false
			continue
		}
		if ps.classes != nil && !contains(ps.classes, s) {
			ps.errorf(n, "unknown class %q (classes: %s)", s, strings.Join(ps.classes, ", "))
			ok = false
			continue
		}
		if !contains(rule.Classes, s) {
			rule.Classes = append(rule.Classes, s)
		}
	}
	return ok
}

// checkVelocityAction refuses combinations 7.1 and 7.4 do not define: a
// lock on a subject other than account, ip, user or device; classes on a
// rule that sets no lock; a multiplier missing from a tighten rule or
// given to another.
func (ps *parser) checkVelocityAction(n *yaml.Node, m *mapping, rule *VelocityRule) bool {
	at := func(name string) *yaml.Node {
		if g, has := m.get(name); has {
			return g.val
		}
		return n
	}
	_, hasMultiplier := m.get("multiplier")
	switch {
	case rule.IsLock() && rule.By != PartAccount && rule.By != PartIP && rule.By != PartUser && rule.By != PartDevice:
		ps.errorf(at("by"), "by %s: action %s locks only account, ip, user or device", rule.Subject(), rule.Action)
	case !rule.IsLock() && len(rule.Classes) > 0:
		ps.errorf(at("classes"), "classes: only for action lockout or step_up, not %s", rule.Action)
	case rule.Action == ActionTighten && !hasMultiplier:
		ps.errorf(n, "velocity rule: missing required field \"multiplier\" (action tighten)")
	case rule.Action != ActionTighten && hasMultiplier:
		ps.errorf(at("multiplier"), "multiplier: only for action tighten, not %s", rule.Action)
	default:
		return true
	}
	return false
}
