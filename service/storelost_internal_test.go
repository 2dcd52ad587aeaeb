package service

import (
	"strconv"
	"testing"

	"github.com/tollgate-dev/tollgate/bucket"
)

// TestSlotTagsCoverEverySlot: every Redis Cluster slot has a marker tag
// that hashes to it, so riskd keeps a marker on whichever master owns a
// slot range.
func TestSlotTagsCoverEverySlot(t *testing.T) {
	t.Parallel()
	seen := make(map[uint16]bool, 16384)
	for i := 0; len(seen) < 16384 && i < 1<<20; i++ {
		seen[bucket.Slot(strconv.Itoa(i))] = true
	}
	if len(seen) != 16384 {
		t.Fatalf("decimal tags below 2^20 reach %d of 16384 slots", len(seen))
	}
	for _, slot := range []int{0, 1, 5460, 5461, 10922, 10923, 16383} {
		if tag := slotTag(slot); tag == "" || int(bucket.Slot(tag)) != slot {
			t.Errorf("slotTag(%d) = %q", slot, tag)
		}
	}
}
