package bucket_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
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
			ruleLocks(t, s, p)
		})
	}
}

// ruleLocks is TestRuleLocks on one store whose keys start with p.
func ruleLocks(t *testing.T, s bucket.Store, p string) {
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
}

// TestRuleLocksCluster: on a real 3-node Redis Cluster, a rule's own lock
// key, the subject's rule set, lock key, trust set and buckets share one
// hash tag (one slot), so the subject's locks are written, read and lifted
// by one script each; TestRuleLocks passes there (the decide script on the
// subject's node enforces the rule's lock), and a multi-slot decision (a
// limit of another subject's slot) enforces it too, with the trust set
// that exempts from it; the listing and the lift find it on its node.
func TestRuleLocksCluster(t *testing.T) {
	t.Parallel()
	cl := testenv.StartCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	t.Cleanup(func() { c.Close() })
	s := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: 5 * time.Second, ExpirySlack: 2 * time.Hour, Cluster: true, Prefix: "rl:"})
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	const p = "rl:"

	tag := bucket.Slot(bucket.LockKey(p, "account", "alice"))
	for _, k := range []string{
		bucket.RuleLockKey(p, "account", "alice", "otp-flood"),
		bucket.RuleLockKey(p, "account", "alice", "a.b_c-9"),
		p + "{account:alice}:lr",
		bucket.TrustKey(p, "account", "alice"),
		bucket.MultiplierKey(p, "account", "alice"),
		p + "{account:alice}:b:l",
	} {
		if got := bucket.Slot(k); got != tag {
			t.Fatalf("slot of %q = %d, want the subject's %d", k, got, tag)
		}
	}
	t.Run("one slot", func(t *testing.T) { ruleLocks(t, s, p) })
	if _, err := s.ClearLock(ctx, bucket.Subject{Kind: "account", ID: "alice"}); err != nil {
		t.Fatal(err)
	}

	// bob: a rule's own exempt lock, decided with a limit of an ip's slot
	bob := bucket.Subject{Kind: "account", ID: "bob"}
	base, own := bucket.LockKey(p, "account", "bob"), bucket.RuleLockKey(p, "account", "bob", "otp-flood")
	tk := bucket.TrustKey(p, "account", "bob")
	lim := bucket.Limit{Key: p + "{ip:203.0.113.9}:b:otp", Burst: 100, Rate: 100, Period: time.Minute}
	if bucket.Slot(lim.Key) == bucket.Slot(own) {
		t.Fatal("one slot: not the multi-slot path")
	}
	otp := bucket.Lock{Kind: "lockout", Rule: "otp-flood", Until: t0.Add(time.Hour), Own: true, Exempt: true}
	if err := s.SetLock(ctx, bob, otp); err != nil {
		t.Fatal(err)
	}
	if err := s.Trust(ctx, bob, "d-good", t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	// written under its own key, named in the subject's rule set
	if v, err := c.Get(ctx, own).Result(); err != nil || !strings.HasSuffix(v, " x otp-flood") {
		t.Fatalf("GET %s = %q %v", own, v, err)
	}
	if n, err := c.Exists(ctx, base).Result(); err != nil || n != 0 {
		t.Fatalf("the subject's lock key was written: %d %v", n, err)
	}
	if ok, err := c.SIsMember(ctx, p+"{account:bob}:lr", "otp-flood").Result(); err != nil || !ok {
		t.Fatalf("rule set: %v %v", ok, err)
	}
	decide := func(device string) bucket.Result {
		t.Helper()
		req := bucket.Request{Now: t0, Cost: 1, Device: device, Locks: []string{base, own}, TrustKeys: []string{tk, tk},
			Limits: []bucket.Limit{lim}}
		var res bucket.Result
		if err := s.Decide(ctx, &req, &res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := decide("d-evil"); !res.Locked || res.Allowed || res.LockIndex != 1 || res.Lock.Rule != "otp-flood" || !res.Lock.Until.Equal(otp.Until) {
		t.Fatalf("multi-slot, untrusted device: %+v, want the rule's lock (index 1)", res)
	}
	if res := decide("d-good"); res.Locked || !res.Allowed {
		t.Fatalf("multi-slot, trusted device: %+v, want allowed (exempt_attested)", res)
	}
	// listed once, as the rule's own
	entries, err := s.ListLocks(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var bobs []bucket.LockEntry
	for _, e := range entries {
		if e.Subject == bob {
			bobs = append(bobs, e)
		}
	}
	if len(bobs) != 1 || !bobs[0].Lock.Own || bobs[0].Lock.Rule != "otp-flood" || !bobs[0].Lock.Exempt {
		t.Fatalf("ListLocks = %+v, want bob's otp-flood lock once", entries)
	}
	if ls, err := s.Locks(ctx, bob); err != nil || len(ls) != 1 || !ls[0].Own {
		t.Fatalf("Locks = %+v %v", ls, err)
	}
	// lifted: ClearLock finds it through the rule set and deletes both
	if was, err := s.ClearLock(ctx, bob); err != nil || !was {
		t.Fatalf("ClearLock = %v %v", was, err)
	}
	if n, err := c.Exists(ctx, own, p+"{account:bob}:lr").Result(); err != nil || n != 0 {
		t.Fatalf("after ClearLock %d of the rule's key and set remain (%v)", n, err)
	}
	if res := decide("d-evil"); res.Locked || !res.Allowed {
		t.Fatalf("after ClearLock: %+v", res)
	}
	if entries, err := s.ListLocks(ctx, 10); err != nil || len(entries) != 0 {
		t.Fatalf("ListLocks after ClearLock = %+v %v", entries, err)
	}
	// and ClearRuleLock lifts it alone
	if err := s.SetLock(ctx, bob, otp); err != nil {
		t.Fatal(err)
	}
	if was, err := s.ClearRuleLock(ctx, bob, "otp-flood"); err != nil || !was {
		t.Fatalf("ClearRuleLock = %v %v", was, err)
	}
	if res := decide("d-evil"); res.Locked {
		t.Fatalf("after ClearRuleLock: %+v", res)
	}
}
