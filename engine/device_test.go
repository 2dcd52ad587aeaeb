package engine

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
)

const devicePolicy = `version: 1
routes:
  - {match: "POST /auth/login", class: auth}
limits:
  - {name: per-device, by: [device], rate: 60/min}
risk:
  attestation: {verified_multiplier: 2, unverified_multiplier: 0.5}
`

// TestDeviceVerified (6.3): only a request with DeviceVerified gets the
// verified multiplier and is matched against trust sets; a bare device id
// gets the unverified multiplier, even with an "attestation" multiplier
// stored (as the first edition wrote) for the id.
func TestDeviceVerified(t *testing.T) {
	t.Parallel()
	rs := &recordingStore{MemoryStore: bucket.NewMemoryStore(bucket.MemoryOptions{})}
	e := newEngine(t, devicePolicy, rs)
	ctx := context.Background()
	legacy := bucket.Multiplier{Source: "attestation", Value: 2, ExpiresAt: time.Now().Add(time.Hour)}
	if err := rs.SetMultiplier(ctx, bucket.Subject{Kind: "device", ID: "d1"}, legacy); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		verified bool
		limit    int64
		device   string // req.Device, for trust sets
	}{
		{"bare id", false, 30, ""},
		{"valid token", true, 120, "d1"},
	} {
		in := Input{Endpoint: "POST /auth/login", IP: "192.0.2.1", DeviceID: "d1", Account: "alice", Cost: 1, DeviceVerified: c.verified}
		var d Decision
		if err := e.Decide(ctx, &in, &d); err != nil {
			t.Fatal(err)
		}
		if d.Limit != c.limit || rs.req.Device != c.device || (c.device != "") != (rs.req.TrustKeys[0] != "") {
			t.Errorf("%s: limit %d, trust device %q keys %q; want %d, %q", c.name, d.Limit, rs.req.Device, rs.req.TrustKeys, c.limit, c.device)
		}
	}
}

// TestL1NeverDeniesATrustedDevice (issue 10 item 2): a lock cached by L1
// never answers for a verified device, which the store may exempt; other
// requests are still denied locally.
func TestL1NeverDeniesATrustedDevice(t *testing.T) {
	t.Parallel()
	now := time.Unix(1700000000, 0)
	mem := bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return now }})
	store := &countingStore{Store: mem}
	e := l1Engine(t, store, NewL1(L1Options{TTL: time.Second}), &now)
	ctx := context.Background()
	_ = mem.SetLock(ctx, bucket.Subject{Kind: "account", ID: "alice"}, bucket.Lock{Kind: "lockout", Rule: "r", Until: now.Add(time.Minute), Exempt: true})
	_ = mem.Trust(ctx, bucket.Subject{Kind: "account", ID: "alice"}, "d-victim", now.Add(time.Hour))
	attacker := Input{Endpoint: "POST /auth/login", IP: "192.0.2.1", Account: "alice", DeviceID: "d-victim", Cost: 1}
	victim := attacker
	victim.DeviceVerified = true
	var d Decision
	for i := 0; i < 50; i++ {
		a, v := attacker, victim
		v.IP = "198.51.100." + itoa(i) // per-ip is 10/s
		if _ = e.Decide(ctx, &a, &d); d.Outcome != Locked {
			t.Fatalf("%d: attacker with the copied id: %v", i, d.Outcome)
		}
		if _ = e.Decide(ctx, &v, &d); d.Outcome != Allowed {
			t.Fatalf("%d: verified trusted device: %v (from L1: %v)", i, d.Outcome, d.FromL1())
		}
	}
	if n := store.calls.Load(); n != 51 {
		t.Fatalf("store calls %d, want 51 (1 for the attacker, then L1; 50 for the victim)", n)
	}
}
