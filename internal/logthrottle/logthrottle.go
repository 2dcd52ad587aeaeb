// Package logthrottle lets one log line a second through, counting the
// others: a log written per request must not grow with a flood (a
// limiter that cannot be reached, forged attestations by the thousand),
// where a metric counts every one.
package logthrottle

import (
	"sync"
	"time"
)

// Throttle lets one log line through per second. The zero value is
// ready; it is safe for concurrent use.
type Throttle struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int64
}

// Allow reports whether to log at now, and how many lines were suppressed
// since the last one logged. A clock that stands still lets nothing more
// through; one that stepped back logs at once rather than go silent.
func (t *Throttle) Allow(now time.Time) (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.last.IsZero() && now.Sub(t.last) < time.Second && !now.Before(t.last) {
		t.suppressed++
		return 0, false
	}
	n := t.suppressed
	t.last, t.suppressed = now, 0
	return n, true
}
