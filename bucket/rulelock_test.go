package bucket_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
)

// TestRuleLocks: a class-restricted rule's lock (Lock.Own) is kept under a
// key of its own beside the subject's lock key, so that neither replaces
// the other; GetLock, Locks, ListLocks, ClearRuleLock and ClearLock see
// both, alike in both stores.
func TestRuleLocks(t *testing.T) {
	t.Parallel()
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s, p := sc.new(t)
			ctx := context.Background()
			alice := bucket.Subject{Kind: "account", ID: "alice"}
			base := bucket.LockKey(p, "account", "alice")
			own := bucket.RuleLockKey(p, "account", "alice", "otp-flood")
			if want := p + "{account:alice}:l:otp-flood"; own != want {
				t.Fatalf("RuleLockKey = %q, want %q", own, want)
			}
			if sub, id, ok := bucket.ParseSubjectKey(own); !ok || sub != "account" || id != "alice" {
				t.Fatalf("ParseSubjectKey(%q) = %q %q %v", own, sub, id, ok)
			}
			auth := bucket.Lock{Kind: "lockout", Rule: "account-failures", Until: t0.Add(15 * time.Minute)}
			otp := bucket.Lock{Kind: "lockout", Rule: "otp-flood", Until: t0.Add(time.Hour), Own: true}
			if err := s.SetLock(ctx, alice, auth); err != nil {
				t.Fatal(err)
			}
			if err := s.SetLock(ctx, alice, otp); err != nil {
				t.Fatal(err)
			}
			decide := func(locks ...string) bucket.Result {
				t.Helper()
				req := bucket.Request{Now: t0, Cost: 1, Locks: locks,
					Limits: []bucket.Limit{{Key: p + "{account:alice}:b:l", Burst: 100, Rate: 100, Period: time.Minute}}}
				var res bucket.Result
				if err := s.Decide(ctx, &req, &res); err != nil {
					t.Fatal(err)
				}
				return res
			}
			if res := decide(base); !res.Locked || res.Lock.Rule != "account-failures" {
				t.Fatalf("subject's lock key: %+v, want the auth lock (the otp lock must not replace it)", res)
			}
			if res := decide(own); !res.Locked || res.Lock.Rule != "otp-flood" || res.LockIndex != 0 {
				t.Fatalf("rule's lock key: %+v", res)
			}
			if res := decide(base, own); !res.Locked || res.LockIndex != 0 {
				t.Fatalf("both keys: %+v", res)
			}
			l, ok, err := s.GetLock(ctx, alice)
			if err != nil || !ok || l.Rule != "otp-flood" || !l.Own || !l.Until.Equal(otp.Until) {
				t.Fatalf("GetLock = %+v %v %v, want the longest lasting (otp-flood, own)", l, ok, err)
			}
			ls, err := s.Locks(ctx, alice)
			if err != nil || len(ls) != 2 || ls[0].Rule != "otp-flood" || ls[1].Rule != "account-failures" || ls[1].Own {
				t.Fatalf("Locks = %+v %v", ls, err)
			}
			entries, err := s.ListLocks(ctx, 10)
			if err != nil || len(entries) != 2 {
				t.Fatalf("ListLocks = %+v %v, want both locks", entries, err)
			}
			owns := 0
			for _, e := range entries {
				if e.Subject != alice {
					t.Fatalf("ListLocks entry %+v: subject", e)
				}
				if e.Lock.Own {
					owns++
				}
			}
			if owns != 1 {
				t.Fatalf("ListLocks = %+v: want one rule-keyed lock", entries)
			}
			// a shorter otp lock written later replaces only its own key
			otp2 := otp
			otp2.Until = t0.Add(5 * time.Minute)
			if err := s.SetLock(ctx, alice, otp2); err != nil {
				t.Fatal(err)
			}
			if res := decide(base); !res.Locked || res.Lock.Rule != "account-failures" {
				t.Fatalf("after a new otp lock: %+v", res)
			}
			// lifting the rule's lock keeps the subject's
			if was, err := s.ClearRuleLock(ctx, alice, "otp-flood"); err != nil || !was {
				t.Fatalf("ClearRuleLock = %v %v", was, err)
			}
			if res := decide(base, own); !res.Locked || res.Lock.Rule != "account-failures" {
				t.Fatalf("after ClearRuleLock: %+v", res)
			}
			if ls, _ := s.Locks(ctx, alice); len(ls) != 1 {
				t.Fatalf("Locks after ClearRuleLock = %+v", ls)
			}
			// ClearLock lifts every lock of the subject
			if err := s.SetLock(ctx, alice, otp); err != nil {
				t.Fatal(err)
			}
			if was, err := s.ClearLock(ctx, alice); err != nil || !was {
				t.Fatalf("ClearLock = %v %v", was, err)
			}
			if res := decide(base, own); res.Locked || !res.Allowed {
				t.Fatalf("after ClearLock: %+v", res)
			}
			if ls, err := s.Locks(ctx, alice); err != nil || len(ls) != 0 {
				t.Fatalf("Locks after ClearLock = %+v %v", ls, err)
			}
			if entries, err := s.ListLocks(ctx, 10); err != nil || len(entries) != 0 {
				t.Fatalf("ListLocks after ClearLock = %+v %v", entries, err)
			}
			if _, ok, _ := s.GetLock(ctx, alice); ok {
				t.Fatal("GetLock after ClearLock: a lock in force")
			}
			// ClearRuleLock "" lifts only the subject's lock key
			if err := s.SetLock(ctx, alice, auth); err != nil {
				t.Fatal(err)
			}
			if err := s.SetLock(ctx, alice, otp); err != nil {
				t.Fatal(err)
			}
			if was, err := s.ClearRuleLock(ctx, alice, ""); err != nil || !was {
				t.Fatalf("ClearRuleLock(\"\") = %v %v", was, err)
			}
			if res := decide(base, own); !res.Locked || res.Lock.Rule != "otp-flood" {
				t.Fatalf("after ClearRuleLock(\"\"): %+v", res)
			}
		})
	}
}
