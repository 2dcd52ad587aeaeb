package engine

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
)

// TestClaimsApart (7.1): a limit keyed by device gives the proven device
// and token-less claims of its id two buckets; a multiplier on the claim
// subject binds only the claims, one on the device binds both.
func TestClaimsApart(t *testing.T) {
	t.Parallel()
	now := time.Unix(1700000000, 0)
	mem := bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return now }})
	e := newEngine(t, devicePolicy, mem) // per-device 60/min; verified x2, unverified x0.5
	ctx := context.Background()
	decide := func(proven bool) Decision {
		in := Input{Endpoint: "POST /auth/login", IP: "192.0.2.1", DeviceID: "phone", DeviceVerified: proven, Cost: 1, Now: now}
		var d Decision
		if err := e.Decide(ctx, &in, &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	for i := 0; i < 30; i++ {
		if d := decide(false); d.Outcome != Allowed {
			t.Fatalf("claim %d: %v", i, d.Outcome)
		}
	}
	if d := decide(false); d.Outcome != Limited {
		t.Fatalf("claims past their 30: %v", d.Outcome)
	}
	if d := decide(true); d.Outcome != Allowed || d.Limit != 120 || d.Remaining != 119 {
		t.Fatalf("the proven device after the claims spent theirs: %v limit %d remaining %d", d.Outcome, d.Limit, d.Remaining)
	}
	// a measure computed from claims binds the claims only
	if err := mem.SetMultiplier(ctx, bucket.Subject{Kind: ClaimSubject, ID: "phone"},
		bucket.Multiplier{Source: "anomaly", Value: 0.05, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if d := decide(true); d.Limit != 120 {
		t.Fatalf("the proven device under the claims' anomaly: limit %d, want 120", d.Limit)
	}
	if d := decide(false); d.Limit != 1 { // 60 x 0.5 x 0.05 = 1.5
		t.Fatalf("a claim under the claims' anomaly: limit %d, want 1", d.Limit)
	}
	// one on the device binds claims of its id too
	if err := mem.SetMultiplier(ctx, bucket.Subject{Kind: "device", ID: "phone"},
		bucket.Multiplier{Source: "admin", Value: 0.5, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if d := decide(true); d.Limit != 30 { // penalties win over the verified bonus
		t.Fatalf("the proven device under an admin 0.5: limit %d, want 30", d.Limit)
	}
	if err := mem.ClearMultiplier(ctx, bucket.Subject{Kind: ClaimSubject, ID: "phone"}, "anomaly"); err != nil {
		t.Fatal(err)
	}
	if err := mem.SetMultiplier(ctx, bucket.Subject{Kind: "device", ID: "phone"},
		bucket.Multiplier{Source: "admin", Value: 0.1, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if d := decide(false); d.Limit != 6 { // 60 x min(0.5, 0.1)
		t.Fatalf("a claim under the device's admin 0.1: limit %d, want 6", d.Limit)
	}
}
