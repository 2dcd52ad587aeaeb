package risk

import (
	"strconv"
	"testing"
	"time"
)

// TestTrustRecordFullIsCheap: riskd's record of trusted devices holds
// MaxTrust enrolments (500,000 by default, a size a large deployment
// reaches with its users' own devices). When full, every new enrolment
// scanned the whole record for the one ending first, under the record's
// lock on riskd's consume path (10,000 enrolments on a full record of
// 100,000 took 17.8 s; 0.2 s now, without -race). Now a full record drops a hundredth of itself,
// the enrolments ending first, in one pass, counts them, and never holds
// more than its bound.
func TestTrustRecordFullIsCheap(t *testing.T) {
	t.Parallel()
	const max, more = 100_000, 10_000
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := trustRecord{max: max, m: map[string]trustVal{}, revoked: map[string]time.Time{}}
	for i := range max {
		r.set("acct", "d"+strconv.Itoa(i), now.Add(time.Hour+time.Duration(i)*time.Second), now, now)
	}
	start := time.Now()
	for i := range more {
		r.set("acct", "new"+strconv.Itoa(i), now.Add(1000*time.Hour), now, now)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("%d enrolments on a full record of %d took %v", more, max, d)
	}
	if n := len(r.m); n > max {
		t.Fatalf("%d enrolments recorded, over %d", n, max)
	}
	if r.evicted != uint64(max+more-len(r.m)) {
		t.Fatalf("evicted %d, want %d", r.evicted, max+more-len(r.m))
	}
	// the enrolments dropped are those ending first: every new one is kept
	for i := range more {
		if _, ok := r.m["acct\x00new"+strconv.Itoa(i)]; !ok {
			t.Fatalf("new enrolment %d dropped before older ones ending sooner", i)
		}
	}
}
