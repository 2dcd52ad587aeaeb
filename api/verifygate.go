package api

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
)

// Bounds of the attestation verifications (AttestOptions.MaxVerifying).
const (
	// verifyWait is how long an attestation waits for a verification
	// slot before it is answered 503.
	verifyWait = time.Second
	// verifyQueue is how many attestations may wait per slot; more are
	// answered 503 at once.
	verifyQueue = 64
)

// verifyGate bounds the attestation verifications in flight, and those
// waiting for a slot. Verifying an App Attest chain is the one CPU-heavy
// step of the limiter (two P-384 signatures, about 2 ms of a core:
// BenchmarkVerifyAttestation), and a forged attestation is verified
// before it is refused (it takes no address budget), so a flood of them
// from many addresses must not take the CPU the decisions need.
type verifyGate struct {
	slots   chan struct{}
	waiting atomic.Int64
	queue   int64
	wait    time.Duration
}

// newVerifyGate returns a gate of n slots (n <= 0: half the CPUs Go
// uses, at least one).
func newVerifyGate(n int) *verifyGate {
	if n <= 0 {
		n = max(1, runtime.GOMAXPROCS(0)/2)
	}
	return &verifyGate{slots: make(chan struct{}, n), queue: int64(n) * verifyQueue, wait: verifyWait}
}

// enter takes a slot, waiting for one at most g.wait; false, taking none,
// when g's queue is full, the wait ends or ctx is done. A true enter is
// followed by one leave.
func (g *verifyGate) enter(ctx context.Context) bool {
	select {
	case g.slots <- struct{}{}:
		return true
	default:
	}
	if g.waiting.Add(1) > g.queue {
		g.waiting.Add(-1)
		return false
	}
	defer g.waiting.Add(-1)
	t := time.NewTimer(g.wait)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// leave gives back the slot of one true enter.
func (g *verifyGate) leave() { <-g.slots }
