package policy

import (
	"fmt"
	"time"
)

// Bounds of a limit's `local_share` (see Limit.LocalShare).
const (
	MinLocalShare = time.Millisecond
	MaxLocalShare = time.Second
)

// localShare parses a limit's `local_share: DURATION`.
func (ps *parser) localShare(g field, lim *Limit) bool {
	d, ok := ps.duration(g)
	if !ok {
		return false
	}
	if d < MinLocalShare || d > MaxLocalShare {
		ps.errorf(g.val, "local_share %v: must be between %v and %v", d, MinLocalShare, MaxLocalShare)
		return false
	}
	lim.LocalShare = d
	return true
}

// checkShare checks that a limit with a local share is a token bucket
// whose share holds at least one token, and keeps no trusted devices'
// buckets (a share serves one key; own buckets are one per device).
func (ps *parser) checkShare(m *mapping, lim *Limit) bool {
	if lim.LocalShare == 0 {
		return true
	}
	g, _ := m.get("local_share")
	var why string
	switch {
	case lim.Kind != KindBucket:
		why = "only a rate limit can be shared (a quota or a concurrency limit is counted exactly in the store)"
	case lim.TrustedOwn:
		why = "a limit with trusted_devices: own keeps a bucket per device, which no share serves"
	case lim.Rate*lim.LocalShare.Seconds()/lim.Period.Seconds() < 1:
		why = fmt.Sprintf("rate %s refills less than one token in %v: a share would hold nothing (raise it, or drop local_share: a limit this slow is no hot key)", lim.RateText, lim.LocalShare)
	default:
		return true
	}
	ps.errorf(g.val, "local_share: %s", why)
	return false
}
