package bucket_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
)

// TestMemoryEvictionsCounted: keys rotated past MaxKeys evict buckets.
// Evicting one not yet full forgets tokens its key spent (its next request
// finds a full bucket), so those evictions are counted (Evicted), where
// evicting buckets already full, which changes no decision, is not.
func TestMemoryEvictionsCounted(t *testing.T) {
	t.Parallel()
	const maxKeys, keys = 64, 1000
	s := bucket.NewMemoryStore(bucket.MemoryOptions{MaxKeys: maxKeys, Now: func() time.Time { return t0 }})
	ctx := context.Background()
	var res bucket.Result
	for i := range keys {
		req := bucket.Request{Now: t0, Cost: 1, Limits: []bucket.Limit{{Key: fmt.Sprintf("%s{ip:%d}:b:login", bucket.DefaultPrefix, i), Rate: 1, Period: time.Minute, Burst: 5}}}
		if err := s.Decide(ctx, &req, &res); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Len(); n > maxKeys {
		t.Fatalf("%d buckets held, over %d", n, maxKeys)
	}
	if got, want := s.Evicted(), uint64(keys-s.Len()); got != want {
		t.Fatalf("Evicted() = %d, want %d (%d keys, %d held, none full again)", got, want, keys, s.Len())
	}
	// buckets full again when evicted change no decision: not counted
	s2 := bucket.NewMemoryStore(bucket.MemoryOptions{MaxKeys: maxKeys})
	for i := range keys {
		req := bucket.Request{Now: t0.Add(time.Duration(i) * 10 * time.Minute), Cost: 1,
			Limits: []bucket.Limit{{Key: fmt.Sprintf("%s{ip:%d}:b:login", bucket.DefaultPrefix, i), Rate: 1, Period: time.Minute, Burst: 5}}}
		if err := s2.Decide(ctx, &req, &res); err != nil {
			t.Fatal(err)
		}
	}
	if got := s2.Evicted(); got != 0 {
		t.Fatalf("Evicted() = %d after evicting only buckets full again", got)
	}
}
