package bucket

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// TestScanIndexHandsEachMemberOnce: the admin lists page through their
// index newest first by position, so entries written while a listing of
// more than a page runs push those already read down into the next page.
// Each member is still handed to the reader once.
func TestScanIndexHandsEachMemberOnce(t *testing.T) {
	t.Parallel()
	c, prefix := testenv.Redis(t)
	s := NewRedisStore(c, RedisOptions{Timeout: 5 * time.Second, Prefix: prefix})
	defer s.Close()
	ctx := context.Background()
	idx := prefix + "index:test"
	for i := range 700 {
		c.ZAdd(ctx, idx, redis.Z{Score: float64(i), Member: fmt.Sprintf("old-%03d", i)})
	}
	seen := map[string]int{}
	pages := 0
	err := s.scanIndex(ctx, idx, 10_000, func(members []redis.Z) ([]redis.Z, error) {
		pages++
		for _, m := range members {
			seen[m.Member.(string)]++
		}
		if pages == 1 { // 100 newer entries arrive while the first page is read
			for i := range 100 {
				c.ZAdd(ctx, idx, redis.Z{Score: float64(1000 + i), Member: fmt.Sprintf("new-%03d", i)})
			}
		}
		return nil, nil
	}, func() int { return len(seen) })
	if err != nil {
		t.Fatal(err)
	}
	for m, n := range seen {
		if n != 1 {
			t.Errorf("%s handed %d times", m, n)
		}
	}
	for i := range 700 {
		if seen[fmt.Sprintf("old-%03d", i)] != 1 {
			t.Fatalf("old-%03d never handed (%d members seen)", i, len(seen))
		}
	}
}

// TestScanIndexTiesAndLifts: members that share a score (set in the same
// millisecond) across several pages are each handed once, and members
// lifted while the listing runs move none of the others past it.
func TestScanIndexTiesAndLifts(t *testing.T) {
	t.Parallel()
	c, prefix := testenv.Redis(t)
	s := NewRedisStore(c, RedisOptions{Timeout: 5 * time.Second, Prefix: prefix})
	defer s.Close()
	ctx := context.Background()
	idx := prefix + "index:ties"
	for i := range 1200 {
		c.ZAdd(ctx, idx, redis.Z{Score: float64(7 + i/1100), Member: fmt.Sprintf("m-%04d", i)})
	}
	seen := map[string]int{}
	pages := 0
	err := s.scanIndex(ctx, idx, 10_000, func(members []redis.Z) ([]redis.Z, error) {
		pages++
		var gone []redis.Z
		for i, m := range members {
			seen[m.Member.(string)]++
			if pages == 1 && i%5 == 0 {
				gone = append(gone, m) // expired: pruned by the scan
			}
		}
		if pages == 1 { // and 99 read ones, of the newer score, are lifted meanwhile
			for _, m := range members[1:100:100] {
				c.ZRem(ctx, idx, m.Member)
			}
		}
		return gone, nil
	}, func() int { return len(seen) })
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1200 {
		t.Errorf("%d of 1200 members handed", len(seen))
	}
	for m, n := range seen {
		if n != 1 {
			t.Errorf("%s handed %d times", m, n)
		}
	}
}
