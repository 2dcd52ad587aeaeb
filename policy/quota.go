package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// LimitKind is what a limit counts.
type LimitKind uint8

// Limit kinds. The zero value is a token bucket.
const (
	// KindBucket is a token bucket (`rate`, `burst`).
	KindBucket LimitKind = iota
	// KindQuota counts `quota: N/period` per UTC calendar period.
	KindQuota
	// KindConcurrency admits `concurrency: N` requests in flight.
	KindConcurrency
)

// String returns "bucket", "quota" or "concurrency" (the `details.kind`
// of a denial, events and metrics).
func (k LimitKind) String() string {
	switch k {
	case KindQuota:
		return "quota"
	case KindConcurrency:
		return "concurrency"
	}
	return "bucket"
}

// Calendar is a quota's period.
type Calendar uint8

// Calendar periods, in UTC: a day, a week starting Monday 00:00, a month.
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

// Limits on quotas and concurrency limits.
const (
	// MaxConcurrency is the largest `concurrency`.
	MaxConcurrency = 1_000_000
	// DefaultLeaseTTL is a concurrency limit's `lease_ttl` when unset.
	DefaultLeaseTTL = 60 * time.Second
	// MaxLeaseTTL is the longest `lease_ttl`.
	MaxLeaseTTL = 24 * time.Hour
)

// calendars maps the period of `quota: N/period` to its Calendar.
var calendars = map[string]Calendar{"day": Day, "week": Week, "month": Month}

// errQuotaSyntax is the error for a quota that is not N/period.
var errQuotaSyntax = errors.New("want N/day, N/week or N/month (N a whole number from 1)")

// parseQuota parses "N/day", "N/week" or "N/month".
func parseQuota(s string) (float64, Calendar, error) {
	num, unit, found := strings.Cut(s, "/")
	c, known := calendars[unit]
	if !found || !known || num == "" || !allDigits(num) {
		return 0, 0, errQuotaSyntax
	}
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || n < 1 {
		return 0, 0, errQuotaSyntax
	}
	if n > MaxRate {
		return 0, 0, fmt.Errorf("N must be at most %g", MaxRate)
	}
	return n, c, nil
}

// limitKind parses the fields of a limit that make it a quota or a
// concurrency limit (`quota`, `concurrency`, `lease_ttl`) into lim.
func (ps *parser) limitKind(g field, lim *Limit) bool {
	switch g.name {
	case "quota":
		s, ok := ps.scalar(g.val, g.name)
		if !ok {
			return false
		}
		n, c, err := parseQuota(s)
		if err != nil {
			ps.errorf(g.val, "quota %q: %v", s, err)
			return false
		}
		lim.Kind, lim.Burst, lim.Calendar, lim.RateText = KindQuota, n, c, s
	case "concurrency":
		x, ok := ps.intRange(g, 1, MaxConcurrency)
		if !ok {
			return false
		}
		lim.Kind, lim.Burst = KindConcurrency, float64(x)
	case "lease_ttl":
		d, ok := ps.duration(g)
		if !ok {
			return false
		}
		if d < time.Second || d > MaxLeaseTTL {
			ps.errorf(g.val, "lease_ttl %v: must be between 1s and %v", d, MaxLeaseTTL)
			return false
		}
		lim.LeaseTTL = d
	}
	return true
}

// checkKind checks that a limit says exactly one of rate, quota and
// concurrency, and only the fields of its kind; it fills the defaults.
func (ps *parser) checkKind(m *mapping, lim *Limit) bool {
	var set []string
	for _, name := range []string{"rate", "quota", "concurrency"} {
		if _, has := m.index[name]; has {
			set = append(set, name)
		}
	}
	switch {
	case len(set) == 0:
		ps.errorf(m.node, "limit: missing required field %q (or %q, or %q)", "rate", "quota", "concurrency")
		return false
	case len(set) > 1:
		g, _ := m.get(set[1])
		ps.errorf(g.val, "%s: a limit is a bucket (rate), a quota or a concurrency limit; this one also has %s", set[1], set[0])
		return false
	}
	ok := true
	for _, f := range []struct{ name, kind string }{{"burst", "rate"}, {"lease_ttl", "concurrency"}, {"trusted_devices", "rate"}} {
		if g, has := m.get(f.name); has && set[0] != f.kind {
			ps.errorf(g.val, "%s: only a limit with %s has one", f.name, f.kind)
			ok = false
		}
	}
	if set[0] == "concurrency" && lim.LeaseTTL == 0 {
		lim.LeaseTTL = DefaultLeaseTTL
	}
	return ok
}

// HasConcurrency reports whether any limit of p is a concurrency limit:
// one that only a path that can release its leases may serve.
func (p *Policy) HasConcurrency() bool {
	return p.FirstConcurrency() != nil
}

// FirstConcurrency returns p's first concurrency limit, or nil.
func (p *Policy) FirstConcurrency() *Limit {
	for i := range p.Limits {
		if p.Limits[i].Kind == KindConcurrency {
			return &p.Limits[i]
		}
	}
	return nil
}

// kindText describes a quota's or a concurrency limit's budget for
// `limiter budgets`: "100/month (quota, UTC)", "2 in flight (lease 1m0s)".
func kindText(l *Limit) string {
	switch l.Kind {
	case KindQuota:
		text := l.RateText
		if text == "" {
			text = strconv.FormatFloat(l.Burst, 'f', -1, 64) + "/" + l.Calendar.String()
		}
		return text + " (quota, UTC)"
	case KindConcurrency:
		return strconv.FormatFloat(l.Burst, 'f', -1, 64) + " in flight (lease " + l.LeaseTTL.String() + ")"
	}
	return rateText(l)
}
