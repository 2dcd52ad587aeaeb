package bucket_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
)

// trustAdmin checks the administration of trust sets on s: the devices
// of an account listed latest ending first, a revocation of one device
// and of all, and UntrustDevice taking a device out of every account that
// trusts it, each judged by the decisions an exempt lock answers.
func trustAdmin(t *testing.T, s bucket.Store, p string) {
	t.Helper()
	ctx := context.Background()
	alice, bob := bucket.Subject{Kind: "account", ID: "alice"}, bucket.Subject{Kind: "account", ID: "bob"}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.SetLock(ctx, alice, bucket.Lock{Kind: "lockout", Rule: "r", Until: t0.Add(48 * time.Hour), Exempt: true}))
	must(s.Trust(ctx, alice, "phone", t0.Add(2*time.Hour)))
	must(s.Trust(ctx, alice, "tablet", t0.Add(3*time.Hour)))
	must(s.Trust(ctx, alice, "laptop", t0.Add(2*time.Hour)))
	must(s.Trust(ctx, bob, "phone", t0.Add(time.Hour)))
	list := func(sub bucket.Subject) string {
		t.Helper()
		ds, err := s.TrustedDevices(ctx, sub)
		must(err)
		out := ""
		for _, d := range ds {
			out += fmt.Sprintf("%s@%v ", d.Device, d.Until.Sub(t0))
		}
		return out
	}
	if got, want := list(alice), "tablet@3h0m0s laptop@2h0m0s phone@2h0m0s "; got != want {
		t.Fatalf("alice's trusted devices %q, want %q", got, want)
	}
	exempt := func(device string) bool {
		t.Helper()
		req := bucket.Request{Cost: 1, Now: t0.Add(time.Minute), Device: device,
			Locks: []string{bucket.LockKey(p, "account", "alice")}, TrustKeys: []string{bucket.TrustKey(p, "account", "alice")},
			Limits: []bucket.Limit{{Key: p + "{ip:192.0.2.1}:b:l", Burst: 100, Rate: 100, Period: time.Minute}}}
		var res bucket.Result
		must(s.Decide(ctx, &req, &res))
		return !res.Locked
	}
	if !exempt("phone") {
		t.Fatal("the trusted phone is locked out before any revocation")
	}
	if was, err := s.Untrust(ctx, alice, "phone"); err != nil || !was {
		t.Fatalf("Untrust(alice, phone) = %v, %v; want true", was, err)
	}
	if was, err := s.Untrust(ctx, alice, "phone"); err != nil || was {
		t.Fatalf("Untrust(alice, phone) again = %v, %v; want false", was, err)
	}
	if exempt("phone") || !exempt("tablet") {
		t.Fatalf("after the phone's revocation: phone exempt %v, tablet exempt %v; want false, true", exempt("phone"), exempt("tablet"))
	}
	if got, want := list(bob), "phone@1h0m0s "; got != want {
		t.Fatalf("bob's trusted devices %q, want %q (alice's revocation is hers)", got, want)
	}
	must(s.Trust(ctx, alice, "phone", t0.Add(2*time.Hour))) // enrolled again, then freed
	if n, err := s.UntrustDevice(ctx, "phone"); err != nil || n != 2 {
		t.Fatalf("UntrustDevice(phone) = %d, %v; want 2 (alice, bob)", n, err)
	}
	if got := list(bob); got != "" {
		t.Fatalf("bob's trusted devices after the phone was freed: %q, want none", got)
	}
	if n, err := s.UntrustDevice(ctx, "phone"); err != nil || n != 0 {
		t.Fatalf("UntrustDevice(phone) again = %d, %v; want 0", n, err)
	}
	if was, err := s.Untrust(ctx, alice, ""); err != nil || !was {
		t.Fatalf("Untrust(alice, all) = %v, %v; want true", was, err)
	}
	if got := list(alice); got != "" || exempt("tablet") {
		t.Fatalf("after revoking all: alice's devices %q, tablet exempt %v; want none, false", got, exempt("tablet"))
	}
	if n, err := s.UntrustDevice(ctx, "tablet"); err != nil || n != 0 {
		t.Fatalf("UntrustDevice(tablet) after alice revoked all = %d, %v; want 0", n, err)
	}
}

func TestTrustAdmin(t *testing.T) {
	t.Parallel()
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s, p := sc.new(t)
			trustAdmin(t, s, p)
		})
	}
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		s := clusterStore(t)
		trustAdmin(t, s, s.(*bucket.RedisStore).Prefix())
	})
}

// TestTrustSetBounded: an account's trust set holds at most
// MaxTrustedDevices devices; an enrolment past it drops the device whose
// trust ends first, in either store. Before, an attacker logging minted
// attested ids in to an account of his own grew its set without end.
func TestTrustSetBounded(t *testing.T) {
	t.Parallel()
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := sc.new(t)
			ctx := context.Background()
			mallory := bucket.Subject{Kind: "account", ID: "mallory"}
			for i := range bucket.MaxTrustedDevices + 5 {
				if err := s.Trust(ctx, mallory, fmt.Sprintf("minted-%03d", i), t0.Add(time.Hour+time.Duration(i)*time.Minute)); err != nil {
					t.Fatal(err)
				}
			}
			ds, err := s.TrustedDevices(ctx, mallory)
			if err != nil {
				t.Fatal(err)
			}
			if len(ds) != bucket.MaxTrustedDevices || ds[len(ds)-1].Device != "minted-005" || ds[0].Device != fmt.Sprintf("minted-%03d", bucket.MaxTrustedDevices+4) {
				t.Fatalf("%d trusted devices, from %s to %s; want %d, minted-%03d to minted-005 (the 5 ending first dropped)",
					len(ds), ds[0].Device, ds[len(ds)-1].Device, bucket.MaxTrustedDevices, bucket.MaxTrustedDevices+4)
			}
		})
	}
}
