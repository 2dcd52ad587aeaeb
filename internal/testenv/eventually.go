package testenv

import (
	"testing"
	"time"
)

// Eventually polls f every 20 ms until it returns "" (the positive signal
// a test waits for) and fails t with f's last message when d passes
// first. Tests wait with it instead of sleeping before they look.
func Eventually(t testing.TB, d time.Duration, f func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		msg := f()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
