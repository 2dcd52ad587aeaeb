package bucket_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// TestTrustedDevicesOfLegacySet: a trust set of an older version is a
// plain set whose members all end with the key (its PTTL). Listing it
// must give each member that end: before, the end was built in Lua with
// tostring, which writes a µs time of 16 digits as "1.7651234567891e+15",
// and the list failed (or ended in 1970).
func TestTrustedDevicesOfLegacySet(t *testing.T) {
	t.Parallel()
	c, p := testenv.Redis(t)
	s := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: 5 * time.Second, ExpirySlack: 2 * time.Hour, Prefix: p})
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	key := bucket.TrustKey(p, "account", "alice")
	if err := c.SAdd(ctx, key, "phone").Err(); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if err := c.PExpire(ctx, key, 2*time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	ds, err := s.TrustedDevices(ctx, bucket.Subject{Kind: "account", ID: "alice"})
	if err != nil {
		t.Fatalf("TrustedDevices of a plain set: %v", err)
	}
	if len(ds) != 1 || ds[0].Device != "phone" {
		t.Fatalf("TrustedDevices of a plain set = %v, want the phone", ds)
	}
	// the end is the key's expiry (Redis's TIME + PTTL, each to the ms): 2h
	// after the PEXPIRE (Redis and this host share the machine's clock)
	if lo, hi := before.Add(2*time.Hour-time.Millisecond), after.Add(2*time.Hour+time.Millisecond); ds[0].Until.Before(lo) || ds[0].Until.After(hi) {
		t.Fatalf("the phone's trust ends %v, want within [%v, %v]", ds[0].Until, lo, hi)
	}
}
