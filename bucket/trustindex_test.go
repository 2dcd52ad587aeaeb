package bucket

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// trustIndexMatches fails t unless the memory store's device index holds
// exactly the (device, trust key) pairs of its trust sets.
func trustIndexMatches(t *testing.T, s *MemoryStore, when string) {
	t.Helper()
	n := 0
	for key, set := range s.trusts {
		for d := range set {
			n++
			if _, ok := s.trustedBy[d][key]; !ok {
				t.Errorf("%s: %s trusts %s, the index does not say so", when, key, d)
			}
		}
	}
	m := 0
	for d, by := range s.trustedBy {
		if len(by) == 0 {
			t.Errorf("%s: the index keeps %s with no trust key", when, d)
		}
		for key := range by {
			m++
			if _, ok := s.trusts[key][d]; !ok {
				t.Errorf("%s: the index says %s trusts %s; it does not", when, key, d)
			}
		}
	}
	if n != m {
		t.Errorf("%s: %d trust entries, %d indexed", when, n, m)
	}
}

// TestMemoryTrustIndex: the memory store's device index follows every
// way a device enters or leaves a trust set (Trust, a set past
// MaxTrustedDevices, Untrust of one device and of all, UntrustDevice,
// the sweep of ended trusts), so UntrustDevice reaches exactly the
// accounts that trust the id.
func TestMemoryTrustIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	s := NewMemoryStore(MemoryOptions{Now: func() time.Time { return now }})
	acct := func(i int) Subject { return Subject{Kind: "account", ID: fmt.Sprint("a", i)} }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		must(s.Trust(ctx, acct(i), "shared", now.Add(time.Hour)))
		must(s.Trust(ctx, acct(i), fmt.Sprint("own-", i), now.Add(time.Duration(i+1)*time.Minute)))
	}
	must(s.Trust(ctx, acct(0), "shared", now.Add(2*time.Hour))) // renewed: indexed once
	trustIndexMatches(t, s, "enrolled")
	for d := range MaxTrustedDevices + 1 { // one past the bound: the first ending goes
		must(s.Trust(ctx, acct(9), fmt.Sprint("many-", d), now.Add(time.Hour+time.Duration(d)*time.Second)))
	}
	if _, ok := s.trustedBy["many-0"]; ok {
		t.Error("the device dropped past the bound is still indexed")
	}
	trustIndexMatches(t, s, "past the bound")
	if n, err := s.UntrustDevice(ctx, "shared"); err != nil || n != 5 {
		t.Fatalf("UntrustDevice(shared) = %d, %v; want 5", n, err)
	}
	trustIndexMatches(t, s, "shared id freed")
	if was, err := s.Untrust(ctx, acct(1), "own-1"); err != nil || !was {
		t.Fatalf("Untrust(a1, own-1) = %v, %v", was, err)
	}
	if was, err := s.Untrust(ctx, acct(9), ""); err != nil || !was {
		t.Fatalf("Untrust(a9, all) = %v, %v", was, err)
	}
	trustIndexMatches(t, s, "revoked")
	now = now.Add(3 * time.Minute) // own-0, own-2 end
	s.Sweep(now)
	trustIndexMatches(t, s, "swept")
	if len(s.trustedBy) != 2 || len(s.trusts) != 2 {
		t.Errorf("after the sweep %d devices indexed in %d sets, want own-3 and own-4", len(s.trustedBy), len(s.trusts))
	}
}
