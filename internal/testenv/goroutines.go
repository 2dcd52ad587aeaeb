package testenv

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Goroutines is a goroutine-leak checker: it records the goroutines
// running now, and the function it returns fails t if, within 10s
// (polled), goroutines started since are still running, with their
// stacks. Call it from a test that is not parallel (Go runs those alone),
// so other tests' goroutines do not count.
func Goroutines(t testing.TB) (check func()) {
	t.Helper()
	before := GoroutineStacks()
	return func() {
		t.Helper()
		var left []string
		deadline := time.Now().Add(10 * time.Second)
		for {
			left = left[:0]
			for id, stack := range GoroutineStacks() {
				if _, ok := before[id]; !ok {
					left = append(left, stack)
				}
			}
			if len(left) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(left) > 0 {
			t.Errorf("%d goroutines left behind:\n\n%s", len(left), strings.Join(left, "\n\n"))
		}
	}
}

// GoroutineStacks maps the id of every goroutine but the caller's to its
// stack.
func GoroutineStacks() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for i, g := range bytes.Split(buf, []byte("\n\n")) {
		if i == 0 {
			continue // the caller's own goroutine comes first
		}
		head, _, _ := strings.Cut(string(g), " [")
		out[head] = string(g)
	}
	return out
}
