package risk

import (
	"testing"
	"time"
)

// TestTrustRecord: the record keeps the latest end of each enrolment,
// forgets expired ones, and when full drops an expired entry, else the
// one that ends first.
func TestTrustRecord(t *testing.T) {
	t.Parallel()
	now := time.Unix(1700000000, 0)
	r := trustRecord{max: 2, m: map[string]time.Time{}}
	r.set("alice", "phone", now.Add(time.Hour), now)
	r.set("alice", "phone", now.Add(time.Minute), now) // an earlier end does not shorten it
	r.set("bob", "tablet", now.Add(2*time.Hour), now)
	r.set("carol", "watch", now.Add(3*time.Hour), now) // full: alice's phone ends first
	got := map[string]time.Time{}
	for _, e := range r.active(now) {
		got[e.account+"/"+e.device] = e.until
	}
	want := map[string]time.Time{"bob/tablet": now.Add(2 * time.Hour), "carol/watch": now.Add(3 * time.Hour)}
	if len(got) != len(want) || got["bob/tablet"] != want["bob/tablet"] || got["carol/watch"] != want["carol/watch"] {
		t.Fatalf("active = %v, want %v", got, want)
	}
	if n := len(r.active(now.Add(150 * time.Minute))); n != 1 {
		t.Fatalf("after bob's end: %d entries, want 1", n)
	}
}
