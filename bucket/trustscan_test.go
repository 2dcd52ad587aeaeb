package bucket_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// scanTrust checks ScanTrust on s: every account's devices in force with
// their ends, an ended one left out, a device's index and another
// subject kind's trust set not taken for an account's, and an escaped
// account id read back as it was given.
func scanTrust(t *testing.T, s bucket.Store) {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	alice, odd := bucket.Subject{Kind: "account", ID: "alice"}, bucket.Subject{Kind: "account", ID: "b{o}b:1 %x"}
	must(s.Trust(ctx, alice, "phone", t0.Add(2*time.Hour)))
	must(s.Trust(ctx, alice, "tablet", t0.Add(3*time.Hour)))
	must(s.Trust(ctx, odd, "phone", t0.Add(time.Hour)))
	must(s.Trust(ctx, bucket.Subject{Kind: "user", ID: "u1"}, "laptop", t0.Add(time.Hour)))
	// many accounts, so that a Redis scan takes more than one SCAN call
	for i := range 2500 {
		must(s.Trust(ctx, bucket.Subject{Kind: "account", ID: fmt.Sprintf("a%04d", i)}, "d", t0.Add(time.Duration(i+1)*time.Second)))
	}
	if got := scanned(t, s); len(got) != 2503 || !slices.Contains(got, "a2499 d 41m40s") ||
		!slices.Equal(got[2500:], []string{"alice phone 2h0m0s", "alice tablet 3h0m0s", "b{o}b:1 %x phone 1h0m0s"}) {
		t.Fatalf("ScanTrust: %d entries, last %q; want 2503 (a0000..a2499, alice's two, b{o}b:1 %%x's)", len(got), got[max(len(got)-3, 0):])
	}
}

// scanned returns ScanTrust's entries, each "account device until-t0", sorted.
func scanned(t *testing.T, s bucket.Store) []string {
	t.Helper()
	var got []string
	err := s.(bucket.TrustScanner).ScanTrust(context.Background(), func(a, d string, until time.Time) error {
		got = append(got, fmt.Sprintf("%s %s %v", a, d, until.Sub(t0)))
		return nil
	})
	if err != nil {
		t.Fatalf("ScanTrust: %v", err)
	}
	slices.Sort(got)
	return got
}

// TestScanTrust reads every account's trust set back from the memory
// store, the shared Redis and a Redis Cluster (every master scanned).
// The Redis stores judge "in force" by Redis TIME: t0 is an hour from
// now, so no end has passed.
func TestScanTrust(t *testing.T) {
	t.Parallel()
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := sc.new(t)
			scanTrust(t, s)
		})
	}
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		scanTrust(t, clusterStore(t))
	})
}

// TestScanTrustGlobPrefix: a prefix with glob characters matches itself
// only, not the keys of a store whose prefix it would match as a pattern.
func TestScanTrustGlobPrefix(t *testing.T) {
	t.Parallel()
	c, p := testenv.Redis(t)
	store := func(prefix string) *bucket.RedisStore {
		s := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: 5 * time.Second, Prefix: prefix})
		t.Cleanup(func() { s.Close() })
		return s
	}
	glob, other := store(p+`a*[b]?\:`), store(p+`axb\:`)
	ctx := context.Background()
	if err := glob.Trust(ctx, bucket.Subject{Kind: "account", ID: "alice"}, "phone", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := other.Trust(ctx, bucket.Subject{Kind: "account", ID: "mallory"}, "phone", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	// a rule lock whose rule ends like a trust key matches the pattern too
	if err := c.Set(ctx, p+`a*[b]?\:{account:eve}:l:x}:t`, "1", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if got := scanned(t, glob); !slices.Equal(got, []string{"alice phone 1h0m0s"}) {
		t.Fatalf("ScanTrust of prefix %q: %q; want alice's phone only", glob.Prefix(), got)
	}
}
