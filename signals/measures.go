package signals

import "github.com/tollgate-dev/tollgate/bucket"

// lockSource is the source part of a lock's measure key.
const lockSource = "lock"

// measure is a lock or multiplier the engine set, as riskd wrote it.
type measure struct {
	act  Action // the SetLock or SetMultiplier action
	rule string // the velocity rule that set it ("anomaly" for anomalies)
	end  int64  // Until / ExpiresAt, Unix ns
	set  int64  // the event time it was set at, Unix ns
	// sweepAt is when, by the engine's clock, the measure has run its
	// course: the clock when it was set plus its duration.
	sweepAt int64
}

// measureKey builds "subject\x00id\x00source" in e.buf.
func (e *Engine) measureKey(subject, id, source string) []byte {
	b := append(e.buf[:0], subject...)
	b = append(b, 0)
	b = append(b, id...)
	b = append(b, 0)
	b = append(b, source...)
	e.buf = b
	return b
}

// lockMeasureKey builds in e.buf the measure key of lock on (subject,
// id): the source is lockSource, followed by "\x00" and the rule for a
// lock kept under its rule's own key (lock.Own).
func (e *Engine) lockMeasureKey(subject, id string, lock bucket.Lock) []byte {
	key := e.measureKey(subject, id, lockSource)
	if lock.Own {
		key = append(append(key, 0), lock.Rule...)
		e.buf = key
	}
	return key
}

// lockRank orders lock kinds by strength.
func lockRank(kind string) int {
	if kind == actionLockout {
		return 2
	}
	return 1
}

// setLock records lock, set at ns on (subject, id), and reports whether
// riskd should write it. It should not when the lock in force at ns is
// stronger (a lockout over a step-up), or of the same kind and lasting at
// least as long. It compares lock only with the lock of its own key: the
// subject's lock key, or, for a class-restricted rule's lock (lock.Own),
// that rule's own key, so that one class's lock never replaces (nor keeps
// out) another's. Callers hold e.mu.
func (e *Engine) setLock(ns int64, subject, id string, lock bucket.Lock, rule string) bool {
	key := e.lockMeasureKey(subject, id, lock)
	en := e.meas.getBytes(key)
	if en != nil && en.val.end > ns {
		old := en.val.act.Lock
		if lockRank(old.Kind) > lockRank(lock.Kind) ||
			old.Kind == lock.Kind && !lock.Until.After(old.Until) {
			return false
		}
	}
	e.record(en, key, Action{Kind: SetLock, Subject: subject, ID: id, Lock: lock}, rule, ns, lock.Until.UnixNano())
	return true
}

// setMultiplier records m, set at ns on (subject, id), and reports whether
// riskd should write it. It should not when the multiplier of the same
// source in force at ns is at least as strict (value <= m's) and lasts at
// least as long: a subject holds one multiplier per source. Callers hold e.mu.
func (e *Engine) setMultiplier(ns int64, subject, id string, m bucket.Multiplier, rule string) bool {
	key := e.measureKey(subject, id, m.Source)
	en := e.meas.getBytes(key)
	if en != nil && en.val.end > ns {
		old := en.val.act.Multiplier
		if old.Value <= m.Value && !m.ExpiresAt.After(old.ExpiresAt) {
			return false
		}
	}
	e.record(en, key, Action{Kind: SetMultiplier, Subject: subject, ID: id, Multiplier: m}, rule, ns, m.ExpiresAt.UnixNano())
	return true
}

// record stores act, set at ns by rule and in force until end (Unix ns),
// as the measure at key (en: its entry, nil when there is none yet).
// Callers hold e.mu.
func (e *Engine) record(en *entry[measure], key []byte, act Action, rule string, ns, end int64) {
	if en == nil {
		en = e.meas.addBytes(key)
	}
	en.val = measure{act: act, rule: rule, end: end, set: ns, sweepAt: e.clock + (end - ns)}
}
