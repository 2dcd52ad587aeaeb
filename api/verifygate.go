package api

import (
	"context"
	"runtime"
	"sync/atomic"
)

// verifyQueue is how many attestations may wait per verification slot
// (AttestOptions.MaxVerifying); more are answered 503 at once. At 1-2 ms
// a verification the last of them waits 60-130 ms.
const verifyQueue = 64

// verifyGate bounds the attestation verifications in flight, and those
// waiting for a slot. Verifying an App Attest chain is the one CPU-heavy
// step of the limiter (two P-384 signatures, about 2 ms of a core for a
// forged chain, 1 ms for Apple's once its intermediate is known:
// BenchmarkVerifyAttestation), and a forged attestation is verified
// before it is refused (it takes no address budget), so a flood of them
// from many addresses must not take the CPU the decisions need.
type verifyGate struct {
	slots   chan struct{}
	waiting atomic.Int64
	queue   int64
}

// newVerifyGate returns a gate of n slots (n <= 0: half the CPUs Go
// uses, at least one).
func newVerifyGate(n int) *verifyGate {
	if n <= 0 {
		n = max(1, runtime.GOMAXPROCS(0)/2)
	}
	return &verifyGate{slots: make(chan struct{}, n), queue: int64(n) * verifyQueue}
}

// enter takes a slot, waiting for one while ctx lasts; false, taking
// none, when g's queue is full or ctx is done first. A true enter is
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
	select {
	case g.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// leave gives back the slot of one true enter.
func (g *verifyGate) leave() { <-g.slots }
