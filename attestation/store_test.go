package attestation_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// challengeStores returns a fresh Challenges of each implementation.
func challengeStores(t *testing.T) map[string]attestation.Challenges {
	c, prefix := testenv.Redis(t)
	return map[string]attestation.Challenges{
		"memory": attestation.NewMemoryChallenges(100),
		"redis":  attestation.NewRedisChallenges(c, prefix),
	}
}

// TestChallenges is the conformance test of both Challenges: one-time,
// bound to the device, well-formed, expiring after five minutes.
func TestChallenges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, ch := range challengeStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, exp, err := ch.Issue(ctx, "d:{1}", genNow)
			if err != nil {
				t.Fatal(err)
			}
			if !exp.Equal(genNow.Add(5 * time.Minute)) {
				t.Fatalf("challenge %q expires %v", c, exp)
			}
			if _, err := base64.RawURLEncoding.DecodeString(c); err != nil || len(c) < 43 {
				t.Fatalf("challenge %q is not 32 bytes or more of unpadded base64url: %v", c, err)
			}
			c2, _, _ := ch.Issue(ctx, "d:{1}", genNow)
			if c2 == c {
				t.Fatal("two challenges are equal")
			}
			for _, s := range []struct {
				name, device, challenge string
			}{
				{"other device", "d2", c},
				{"unknown", "d:{1}", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
				{"malformed", "d:{1}", "not a challenge}:x"},
				{"empty", "d:{1}", ""},
				{"CR for a character", "d:{1}", c[:20] + "\r" + c[21:]}, // base64 skips it
			} {
				if err := ch.Consume(ctx, s.device, s.challenge, genNow); stepOf(err) != attestation.StepChallenge {
					t.Errorf("%s: err = %v, want step challenge", s.name, err)
				}
			}
			for range 2 { // checking uses nothing up
				if err := ch.Check(ctx, "d:{1}", c, genNow.Add(time.Minute)); err != nil {
					t.Fatalf("check: %v", err)
				}
			}
			if err := ch.Check(ctx, "d2", c, genNow); stepOf(err) != attestation.StepChallenge {
				t.Errorf("check for another device: err = %v, want step challenge", err)
			}
			if err := ch.Check(ctx, "d:{1}", c, genNow.Add(5*time.Minute)); stepOf(err) != attestation.StepChallenge {
				t.Errorf("check once expired: err = %v, want step challenge", err)
			}
			if err := ch.Consume(ctx, "d:{1}", c, genNow.Add(time.Minute)); err != nil {
				t.Fatalf("first consume: %v", err)
			}
			if err := ch.Check(ctx, "d:{1}", c, genNow.Add(time.Minute)); stepOf(err) != attestation.StepChallenge {
				t.Errorf("check once used: err = %v, want step challenge", err)
			}
			if err := ch.Consume(ctx, "d:{1}", c, genNow.Add(time.Minute)); stepOf(err) != attestation.StepChallenge {
				t.Fatalf("replayed challenge: err = %v, want step challenge", err)
			}
			if err := ch.Consume(ctx, "d:{1}", c2, genNow); err != nil {
				t.Fatalf("second challenge: %v", err)
			}
		})
	}
}

// TestMemoryChallengesExpiryAndBound checks expiry by the injected clock,
// the bound (oldest evicted) and that consumed challenges do not pile up.
func TestMemoryChallengesExpiryAndBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := attestation.NewMemoryChallenges(3)
	c, _, _ := m.Issue(ctx, "d", genNow)
	if err := m.Consume(ctx, "d", c, genNow.Add(5*time.Minute)); stepOf(err) != attestation.StepChallenge {
		t.Fatalf("expired challenge: err = %v", err)
	}
	var issued []string
	for i := range 4 {
		c, _, err := m.Issue(ctx, "d", genNow.Add(time.Duration(i)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		issued = append(issued, c)
	}
	if m.Len() != 3 {
		t.Fatalf("Len = %d, want 3", m.Len())
	}
	if err := m.Consume(ctx, "d", issued[0], genNow.Add(5*time.Second)); stepOf(err) != attestation.StepChallenge {
		t.Fatalf("oldest should be evicted: err = %v", err)
	}
	for _, c := range issued[1:] {
		if err := m.Consume(ctx, "d", c, genNow.Add(5*time.Second)); err != nil {
			t.Fatalf("newer challenge: %v", err)
		}
	}
	// Issue and consume many: storage stays bounded and expired ones go.
	for i := range 1000 {
		now := genNow.Add(time.Duration(i) * time.Second)
		c, _, _ := m.Issue(ctx, fmt.Sprint("d", i%7), now)
		if i%2 == 0 {
			if err := m.Consume(ctx, fmt.Sprint("d", i%7), c, now); err != nil {
				t.Fatal(err)
			}
		}
	}
	if m.Len() > 3 {
		t.Fatalf("Len = %d, want at most 3", m.Len())
	}
	m.Issue(ctx, "d", genNow.Add(24*time.Hour))
	if m.Len() != 1 {
		t.Fatalf("after a day Len = %d, want 1 (expired swept)", m.Len())
	}
}

// TestRedisChallengeKeys: issuing a challenge writes nothing of the
// device's (7.5: a flood of challenges cannot fill Redis); using one sets
// its marker until it expires; the replicas share one secret, kept
// without expiry, and follow a new one made after Redis lost it; a
// challenge of the earlier form (a key of its own) is still used once.
func TestRedisChallengeKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, prefix := testenv.Redis(t)
	a, b := attestation.NewRedisChallenges(c, prefix), attestation.NewRedisChallenges(c, prefix)
	s, _, err := a.Issue(ctx, "dev:{x}", genNow)
	if err != nil {
		t.Fatal(err)
	}
	if keys, _ := c.Keys(ctx, prefix+"{device:*").Result(); len(keys) != 0 {
		t.Fatalf("issuing wrote %v", keys)
	}
	if ttl, err := c.PTTL(ctx, prefix+"attest:challenge-key").Result(); err != nil || ttl != -1 {
		t.Fatalf("the secret's PTTL = %v, %v; want no expiry", ttl, err)
	}
	if err := b.Consume(ctx, "dev:{x}", s, genNow.Add(time.Minute)); err != nil {
		t.Fatalf("another replica consuming: %v", err)
	}
	keys, _ := c.Keys(ctx, prefix+"{device:dev%3A%7Bx%7D}:chu:*").Result()
	if len(keys) != 1 {
		t.Fatalf("used markers %v; want one", keys)
	}
	if ttl, err := c.PTTL(ctx, keys[0]).Result(); err != nil || ttl <= 3*time.Minute+50*time.Second || ttl > 4*time.Minute {
		t.Fatalf("the marker's PTTL = %v, %v; want the 4m the challenge had left", ttl, err)
	}
	if err := a.Consume(ctx, "dev:{x}", s, genNow.Add(time.Minute)); stepOf(err) != attestation.StepChallenge {
		t.Fatalf("used twice, by the other replica: err = %v", err)
	}
	// Redis lost the secret: a replica starting makes a new one, and a,
	// whose secret is not a minute old, reads it again on the first
	// signature it cannot verify
	if err := c.Del(ctx, prefix+"attest:challenge-key").Err(); err != nil {
		t.Fatal(err)
	}
	s2, _, err := attestation.NewRedisChallenges(c, prefix).Issue(ctx, "d", genNow.Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Consume(ctx, "d", s2, genNow.Add(20*time.Second)); err != nil {
		t.Fatalf("a challenge signed with the new secret: %v", err)
	}
	legacy := strings.Repeat("A", 42) + "Q"
	if err := c.Set(ctx, prefix+"{device:d}:ch:"+legacy, "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(ctx, "d", legacy, genNow); err != nil {
		t.Fatalf("checking an earlier challenge: %v", err)
	}
	if err := a.Consume(ctx, "d", legacy, genNow); err != nil {
		t.Fatalf("an earlier challenge: %v", err)
	}
	if err := a.Consume(ctx, "d", legacy, genNow); stepOf(err) != attestation.StepChallenge {
		t.Fatalf("an earlier challenge used twice: err = %v", err)
	}
}

// TestChallengesStoreDown checks that an unreachable Redis is ErrUnavailable, not an *Error.
func TestChallengesStoreDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	ch := attestation.NewRedisChallenges(c, "x:")
	if _, _, err := ch.Issue(ctx, "d", genNow); !errors.Is(err, attestation.ErrUnavailable) {
		t.Fatalf("Issue: err = %v, want ErrUnavailable", err)
	}
	if err := ch.Consume(ctx, "d", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", genNow); !errors.Is(err, attestation.ErrUnavailable) || stepOf(err) != "not an *Error: "+err.Error() {
		t.Fatalf("Consume: err = %v, want ErrUnavailable", err)
	}
	d := attestation.NewRedisDevices(c, "x:")
	if _, _, err := d.Get(ctx, "d"); !errors.Is(err, attestation.ErrUnavailable) {
		t.Fatalf("Get: err = %v, want ErrUnavailable", err)
	}
}

func appleStatus(keyID string, counter uint32, at time.Time) attestation.Status {
	return attestation.Status{Platform: attestation.PlatformApple, Verified: true, VerifiedAt: at, ExpiresAt: at.Add(24 * time.Hour),
		KeyID: keyID, Counter: counter, PublicKey: []byte{0x30, 0x01, 0x02}, Reason: "app attest verified"}
}

// TestDevices is the conformance test of both Devices.
func TestDevices(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, prefix := testenv.Redis(t)
	clock := genNow
	stores := map[string]attestation.Devices{
		"memory": attestation.NewMemoryDevices(100, func() time.Time { return clock }),
		"redis":  attestation.NewRedisDevices(c, prefix),
	}
	for name, d := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if _, ok, err := d.Get(ctx, "d1"); ok || err != nil {
				t.Fatalf("Get before Put: ok %v err %v", ok, err)
			}
			if err := d.Advance(ctx, "d1", appleStatus("k1", 1, genNow)); stepOf(err) != attestation.StepKeyID {
				t.Fatalf("Advance without status: err = %v, want step key id", err)
			}
			want := appleStatus("k1", 0, genNow)
			if err := d.Put(ctx, "d1", want); err != nil {
				t.Fatal(err)
			}
			got, ok, err := d.Get(ctx, "d1")
			if err != nil || !ok || !statusEqual(got, want) {
				t.Fatalf("Get = %+v %v %v, want %+v", got, ok, err, want)
			}
			for _, s := range []struct {
				name     string
				status   attestation.Status
				wantStep string
			}{
				{"counter 1", appleStatus("k1", 1, genNow.Add(time.Minute)), ""},
				{"counter 1 again", appleStatus("k1", 1, genNow.Add(time.Minute)), attestation.StepCounter},
				{"counter 0", appleStatus("k1", 0, genNow.Add(time.Minute)), attestation.StepCounter},
				{"other key", appleStatus("k2", 9, genNow.Add(time.Minute)), attestation.StepKeyID},
				{"counter 7", appleStatus("k1", 7, genNow.Add(2*time.Minute)), ""},
			} {
				if err := d.Advance(ctx, "d1", s.status); stepOf(err) != s.wantStep {
					t.Fatalf("%s: err = %v, want step %q", s.name, err, s.wantStep)
				}
			}
			got, _, _ = d.Get(ctx, "d1")
			if got.Counter != 7 || !got.VerifiedAt.Equal(genNow.Add(2*time.Minute)) {
				t.Fatalf("after Advance: %+v", got)
			}
			if err := d.Put(ctx, "d1", attestation.Status{Platform: "apple", Verified: true, ExpiresAt: genNow}); err == nil {
				t.Fatal("Put without VerifiedAt succeeded")
			}
			for i, want := range []bool{true, false} {
				if was, err := d.Forget(ctx, "d1"); was != want || err != nil {
					t.Fatalf("Forget %d = %v %v, want %v", i+1, was, err, want)
				}
			}
			if _, ok, err := d.Get(ctx, "d1"); ok || err != nil {
				t.Fatalf("Get after Forget: ok %v err %v", ok, err)
			}
			if err := d.Put(ctx, "d1", appleStatus("k2", 0, genNow)); err != nil {
				t.Fatalf("Put after Forget: %v", err)
			}
		})
	}
}

// TestDevicesConcurrentAdvance races assertions with the same counter:
// exactly one may pass, in either store.
func TestDevicesConcurrentAdvance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, prefix := testenv.Redis(t)
	stores := map[string]attestation.Devices{
		"memory": attestation.NewMemoryDevices(100, func() time.Time { return genNow }),
		"redis":  attestation.NewRedisDevices(c, prefix),
	}
	for name, d := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if err := d.Put(ctx, "race", appleStatus("k", 0, genNow)); err != nil {
				t.Fatal(err)
			}
			for round := uint32(1); round <= 5; round++ {
				var passed atomic.Int32
				var wg sync.WaitGroup
				for range 16 {
					wg.Go(func() {
						err := d.Advance(ctx, "race", appleStatus("k", round, genNow))
						switch {
						case err == nil:
							passed.Add(1)
						case stepOf(err) != attestation.StepCounter:
							t.Errorf("err = %v", err)
						}
					})
				}
				wg.Wait()
				if passed.Load() != 1 {
					t.Fatalf("round %d: %d assertions passed, want 1", round, passed.Load())
				}
			}
		})
	}
}

// TestRedisDevicesKeyAndTTL checks the key layout and that the status
// (with the App Attest key) lasts valid_for.
func TestRedisDevicesKeyAndTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, prefix := testenv.Redis(t)
	d := attestation.NewRedisDevices(c, prefix)
	if err := d.Put(ctx, "a b", appleStatus("k", 0, genNow)); err != nil {
		t.Fatal(err)
	}
	key := attestation.StatusKey(prefix, "a b")
	if key != prefix+"{device:a%20b}:att" {
		t.Fatalf("key = %q", key)
	}
	ttl, err := c.PTTL(ctx, key).Result()
	if err != nil || ttl <= 23*time.Hour || ttl > 24*time.Hour {
		t.Fatalf("PTTL = %v, %v; want about 24h", ttl, err)
	}
	if err := d.Advance(ctx, "a b", appleStatus("k", 1, genNow)); err != nil {
		t.Fatal(err)
	}
	if ttl, _ := c.PTTL(ctx, key).Result(); ttl <= 23*time.Hour {
		t.Fatalf("PTTL after Advance = %v", ttl)
	}
	c.Set(ctx, key, "not json", time.Minute)
	if _, _, err := d.Get(ctx, "a b"); err == nil {
		t.Fatal("Get of a corrupt status succeeded")
	}
	if err := d.Advance(ctx, "a b", appleStatus("k", 2, genNow)); err == nil || stepOf(err) == attestation.StepCounter {
		t.Fatalf("Advance over a corrupt status: err = %v", err)
	}
}

// TestMemoryDevicesExpiryAndBound checks expiry by the clock and the bound.
func TestMemoryDevicesExpiryAndBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	now := genNow
	d := attestation.NewMemoryDevices(2, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	short := appleStatus("k", 0, genNow)
	short.ExpiresAt = genNow.Add(time.Hour)
	d.Put(ctx, "short", short)
	d.Put(ctx, "long", appleStatus("k", 0, genNow))
	d.Put(ctx, "new", appleStatus("k", 0, genNow))
	if d.Len() != 2 {
		t.Fatalf("Len = %d", d.Len())
	}
	if _, ok, _ := d.Get(ctx, "short"); ok {
		t.Fatal("the status expiring soonest should have been evicted")
	}
	mu.Lock()
	now = genNow.Add(25 * time.Hour)
	mu.Unlock()
	if _, ok, _ := d.Get(ctx, "long"); ok {
		t.Fatal("expired status returned")
	}
}

func statusEqual(a, b attestation.Status) bool {
	return a.Platform == b.Platform && a.Verified == b.Verified && a.VerifiedAt.Equal(b.VerifiedAt) && a.ExpiresAt.Equal(b.ExpiresAt) &&
		a.KeyID == b.KeyID && a.Counter == b.Counter && string(a.PublicKey) == string(b.PublicKey) && a.Reason == b.Reason &&
		a.HeldUntil.Equal(b.HeldUntil)
}

// TestDevicesHeld: a status with a HeldUntil past its ExpiresAt is kept
// until HeldUntil (the id stays bound to its key after the attestation
// lapsed): Get returns it, lapsed (not Valid, Kept), with its HeldUntil;
// Advance takes an assertion of its key; the Redis key lives until
// HeldUntil; the memory store drops it after HeldUntil. A status without
// HeldUntil (an older version's) is kept until ExpiresAt.
func TestDevicesHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const hold = 30 * 24 * time.Hour
	held := appleStatus("k", 0, genNow)
	held.HeldUntil = held.ExpiresAt.Add(hold)
	if !held.Valid(genNow) || !held.Kept(genNow) || !held.KeptUntil().Equal(held.HeldUntil) {
		t.Fatalf("status in force: Valid %v Kept %v KeptUntil %v", held.Valid(genNow), held.Kept(genNow), held.KeptUntil())
	}
	lapsed := genNow.Add(25 * time.Hour)
	if held.Valid(lapsed) || !held.Kept(lapsed) || held.Kept(held.HeldUntil) {
		t.Fatalf("lapsed status: Valid %v Kept %v, Kept at HeldUntil %v", held.Valid(lapsed), held.Kept(lapsed), held.Kept(held.HeldUntil))
	}
	if old := appleStatus("k", 0, genNow); !old.KeptUntil().Equal(old.ExpiresAt) || old.Kept(lapsed) {
		t.Fatalf("a status without HeldUntil: KeptUntil %v", old.KeptUntil())
	}

	c, prefix := testenv.Redis(t)
	r := attestation.NewRedisDevices(c, prefix)
	if err := r.Put(ctx, "h", held); err != nil {
		t.Fatal(err)
	}
	if ttl, err := c.PTTL(ctx, attestation.StatusKey(prefix, "h")).Result(); err != nil || ttl <= 24*time.Hour+hold-time.Hour || ttl > 24*time.Hour+hold {
		t.Fatalf("PTTL = %v, %v; want about valid_for + the hold", ttl, err)
	}
	if got, ok, err := r.Get(ctx, "h"); err != nil || !ok || !statusEqual(got, held) {
		t.Fatalf("Get = %+v %v %v", got, ok, err)
	}

	var mu sync.Mutex
	now := genNow
	m := attestation.NewMemoryDevices(10, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	set := func(at time.Time) { mu.Lock(); now = at; mu.Unlock() }
	if err := m.Put(ctx, "h", held); err != nil {
		t.Fatal(err)
	}
	set(lapsed)
	if got, ok, err := m.Get(ctx, "h"); err != nil || !ok || !statusEqual(got, held) || got.Valid(lapsed) {
		t.Fatalf("memory Get of the lapsed, held status = %+v %v %v", got, ok, err)
	}
	next := appleStatus("k", 1, lapsed)
	next.HeldUntil = next.ExpiresAt.Add(hold)
	if err := m.Advance(ctx, "h", next); err != nil {
		t.Fatalf("Advance of the held key: %v", err)
	}
	set(next.HeldUntil)
	if _, ok, _ := m.Get(ctx, "h"); ok {
		t.Fatal("memory status returned at its HeldUntil")
	}
}
