package logthrottle

import (
	"testing"
	"time"
)

// TestThrottle: one line a second, the others counted.
func TestThrottle(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1713522600, 0)
	var th Throttle
	steps := []struct {
		at             time.Duration
		wantOK         bool
		wantSuppressed int64
	}{
		{0, true, 0},
		{0, false, 0}, // the same instant: a clock standing still does not flood the log
		{100 * time.Millisecond, false, 0},
		{900 * time.Millisecond, false, 0},
		{time.Second, true, 3},
		{1500 * time.Millisecond, false, 0},
		{-time.Hour, true, 1}, // the clock stepped back: log, do not go silent
		{-time.Hour + time.Millisecond, false, 0},
	}
	for i, s := range steps {
		n, ok := th.Allow(t0.Add(s.at))
		if ok != s.wantOK || n != s.wantSuppressed {
			t.Errorf("step %d: Allow = %d, %v; want %d, %v", i, n, ok, s.wantSuppressed, s.wantOK)
		}
	}
}
