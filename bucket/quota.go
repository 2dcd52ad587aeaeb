package bucket

import (
	"context"
	"errors"
	"math"
	"strconv"
	"time"
)

// Kind is what a Limit counts.
type Kind uint8

// Limit kinds. The zero value is a token bucket.
const (
	// KindBucket is a token bucket: Burst, Rate and Period.
	KindBucket Kind = iota
	// KindQuota counts Burst per UTC calendar period (Limit.Calendar) and
	// resets at each period's start.
	KindQuota
	// KindConcurrency admits Burst requests in flight: each admitted
	// request holds a lease (Request.Lease) until it is released
	// (Releaser) or its LeaseTTL has passed.
	KindConcurrency
)

// String returns the kind as events and metrics name it: "bucket",
// "quota" or "concurrency".
func (k Kind) String() string {
	switch k {
	case KindQuota:
		return "quota"
	case KindConcurrency:
		return "concurrency"
	}
	return "bucket"
}

// Calendar is the period of a quota: a UTC day, a week starting Monday
// 00:00 UTC, or a month.
type Calendar uint8

// Calendar periods (their values are decide.lua's).
const (
	Day Calendar = iota + 1
	Week
	Month
)

// String returns "day", "week" or "month".
func (c Calendar) String() string {
	switch c {
	case Day:
		return "day"
	case Week:
		return "week"
	case Month:
		return "month"
	}
	return "unknown"
}

// Bounds returns the start of the UTC period holding t and the next
// period's start (the end of this one), as decide.lua computes them.
func (c Calendar) Bounds(t time.Time) (start, end time.Time) {
	t = t.UTC()
	y, m, d := t.Date()
	switch c {
	case Week:
		day := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
		back := (int(day.Weekday()) + 6) % 7 // days since Monday
		start = day.AddDate(0, 0, -back)
		return start, start.AddDate(0, 0, 7)
	case Month:
		start = time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 1, 0)
	}
	start = time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	return start, start.AddDate(0, 0, 1)
}

// calendarUS is Bounds in Unix microseconds (of a time in µs).
func calendarUS(c Calendar, now float64) (start, end float64) {
	s, e := c.Bounds(time.UnixMicro(int64(now)))
	return float64(s.UnixMicro()), float64(e.UnixMicro())
}

// LeaseLen is the length of a lease id: 24 lowercase hex digits.
const LeaseLen = 24

// ErrBadLease reports a lease id that is not LeaseLen lowercase hex digits.
var ErrBadLease = errors.New("bucket: a lease id is 24 lowercase hex digits")

// Releaser frees concurrency slots.
type Releaser interface {
	// Release removes lease from the concurrency sets keys (the limits'
	// keys of the decision that admitted it). It reports whether the
	// lease held a slot in force in any of them: false for an unknown,
	// released or expired lease, which frees nothing.
	Release(ctx context.Context, lease string, keys []string) (bool, error)
}

// validLease reports whether id is LeaseLen lowercase hex digits.
func validLease(id string) bool {
	if len(id) != LeaseLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// leaseNumbers splits a valid lease id into the two 48-bit integers
// decide.lua receives (it formats them back as the same 24 digits).
func leaseNumbers(id string) (hi, lo float64) {
	h, _ := strconv.ParseUint(id[:12], 16, 64)
	l, _ := strconv.ParseUint(id[12:], 16, 64)
	return float64(h), float64(l)
}

// validateKind checks a quota's or a concurrency limit's numbers.
func (l *Limit) validateKind() error {
	if !(l.Burst > 0) || math.IsInf(l.Burst, 0) {
		return errors.New("bucket: limit " + strconv.Quote(l.Key) + " needs a capacity > 0")
	}
	if l.Kind == KindQuota && (l.Calendar < Day || l.Calendar > Month) {
		return errors.New("bucket: quota " + strconv.Quote(l.Key) + " needs a calendar period")
	}
	if l.Kind == KindConcurrency && l.LeaseTTL < time.Millisecond {
		return errors.New("bucket: concurrency limit " + strconv.Quote(l.Key) + " needs a lease TTL of at least 1ms")
	}
	if l.Kind > KindConcurrency {
		return errors.New("bucket: limit " + strconv.Quote(l.Key) + " has an unknown kind")
	}
	return nil
}

// hasConcurrency reports whether any limit of r is a concurrency limit.
func (r *Request) hasConcurrency() bool {
	for i := range r.Limits {
		if r.Limits[i].Kind == KindConcurrency {
			return true
		}
	}
	return false
}

// evaluateQuota is decide.lua's special() for a quota, into ev: ev.b is
// the stored count (tokens: micro-units used, last: its period's start).
func evaluateQuota(ev *eval, now float64, l *Limit, m, pend float64, unknown bool, cost float64) {
	s, e := calendarUS(l.Calendar, now)
	used := 0.0
	if b := ev.b; b != nil && b.last == s {
		used = b.tokens
	}
	effb := math.Floor(l.Burst * m * unit)
	tokens := math.Max(effb-used, 0)
	ev.last, ev.used, ev.reset, ev.end = s, used, e, e
	finishSpecial(ev, now, tokens, effb, cost, e-now, pend, unknown)
}

// finishSpecial is the end of decide.lua's special(): whether need fits in
// tokens, and the wait when it does not.
func finishSpecial(ev *eval, now, tokens, effb, need, retry, pend float64, unknown bool) {
	ok := tokens >= need
	switch {
	case ok:
		retry = 0
	case need > effb && pend > now && !unknown:
		retry = pend - now
	case need > effb:
		retry = 3600000000
	}
	ev.tokens, ev.effb, ev.per, ev.ok, ev.retry = tokens, effb, 0, ok, retry
}

// leaseSet is a memory store's concurrency set: lease id -> expiry (µs).
type leaseSet map[string]float64

// evaluateConcurrency is decide.lua's special() for a concurrency limit
// over its set.
func evaluateConcurrency(ev *eval, set leaseSet, now float64, l *Limit, m, pend float64, unknown bool, cost float64) {
	live, soonest := 0.0, math.Inf(1)
	for _, exp := range set {
		if exp > now {
			live++
			soonest = math.Min(soonest, exp)
		}
	}
	if live == 0 {
		soonest = now
	}
	effb := math.Floor(l.Burst*m) * unit
	tokens := math.Max(effb-live*unit, 0)
	need := 0.0
	if cost > 0 {
		need = unit
	}
	ev.last, ev.used, ev.reset, ev.end = now, live, soonest, now+float64(l.LeaseTTL.Microseconds())
	finishSpecial(ev, now, tokens, effb, need, soonest-now, pend, unknown)
}

// takeConcurrency adds lease to set for a decision that takes, as
// decide.lua's lease() and take() do, dropping expired leases; it returns
// how many more leases set holds.
func takeConcurrency(ev *eval, set leaseSet, lease string, now float64) int {
	n := 0
	for id, exp := range set {
		if exp <= now {
			delete(set, id)
			n--
		}
	}
	if _, ok := set[lease]; !ok {
		n++
	}
	set[lease] = ev.end
	if ev.reset == now || ev.end < ev.reset {
		ev.reset = ev.end
	}
	ev.tokens -= unit
	return n
}
