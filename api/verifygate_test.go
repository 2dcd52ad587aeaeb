package api

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/attestation/attestationtest"
)

// TestVerifyGate: a gate of one slot admits one verification; the next
// waits and takes the slot when it is given back; a waiter past the
// queue is refused at once, and a waiter whose request ends is refused.
func TestVerifyGate(t *testing.T) {
	t.Parallel()
	g := newVerifyGate(1)
	g.queue = 1
	ctx := context.Background()
	if !g.enter(ctx) {
		t.Fatal("first enter refused")
	}
	got := make(chan bool)
	go func() { got <- g.enter(ctx) }()
	for g.waiting.Load() != 1 {
		time.Sleep(time.Millisecond) // until the waiter waits
	}
	if g.enter(ctx) {
		t.Fatal("an enter past the queue was admitted")
	}
	g.leave()
	if !<-got {
		t.Fatal("the waiter was refused the slot given back")
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { got <- g.enter(cctx) }()
	for g.waiting.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if <-got {
		t.Fatal("a waiter whose context ended was admitted")
	}
	g.leave()
	if !g.enter(ctx) || g.waiting.Load() != 0 {
		t.Fatalf("the free slot: refused, or %d still waiting", g.waiting.Load())
	}
}

// TestAttestVerificationsSaturated: an attestation that finds every
// verification slot taken and the queue full is answered 503
// LIMITER_UNAVAILABLE at once, on either platform, and its challenge
// stays usable.
func TestAttestVerificationsSaturated(t *testing.T) {
	t.Parallel()
	e := newAttEnv(t, attestation.NewMemoryChallenges(0), attestation.NewMemoryDevices(0, func() time.Time { return attNow }))
	h := e.h.(*attestHandler)
	busy := 0
	h.o.Count = func(_, result, _ string) {
		if result == ResultBusy {
			busy++
		}
	}
	h.gate.queue = 0
	for range cap(h.gate.slots) {
		h.gate.slots <- struct{}{}
	}
	ch := e.challenge(t, "busy")
	att := e.attest(t, ch, attestationtest.Options{})
	for path, body := range map[string]string{
		PathAttestApple:   attAppleBody("busy", att, ch),
		PathAttestAndroid: attJSON("device_id", "busy", "token", e.playToken(t, ch, nil), "challenge", ch),
	} {
		code, resp := attDo(t, h, "POST", path, body)
		if code != 503 || resp.Error == nil || resp.Error.Code != CodeLimiterUnavailable {
			t.Fatalf("%s with every slot taken: %d %+v, want 503 %s", path, code, resp.Error, CodeLimiterUnavailable)
		}
	}
	if busy != 2 {
		t.Fatalf("%d answers counted busy, want 2", busy)
	}
	<-h.gate.slots
	if code, resp := attDo(t, h, "POST", PathAttestApple, attAppleBody("busy", att, ch)); code != 200 {
		t.Fatalf("the same attestation once a slot is free: %d %+v", code, resp.Error)
	}
}
