package risk

import (
	"fmt"
	"testing"
	"time"
)

// TestTrustJournalDue: an enrolment is journaled when new, and again only
// when a login extends it by journalStep or more (a device that logs in
// every hour is written once a day); a write that failed is due again; an
// enrolment dropped before its write, or read back from the journal, is
// not written.
func TestTrustJournalDue(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := trustRecord{max: 100, m: map[string]trustVal{}, revoked: map[string]revocation{}}
	until := now.Add(DefaultTrustFor)
	due := func(want string) {
		t.Helper()
		var got []string
		for _, e := range r.takeDirty(10) {
			got = append(got, fmt.Sprintf("%s/%s@%s", e.account, e.device, e.until.Sub(until)))
		}
		if fmt.Sprint(got) != want {
			t.Errorf("due %v, want %s", got, want)
		}
	}
	r.set("alice", "phone", until, now, tokenProof{}, now)
	r.set("alice", "phone", until, now, tokenProof{}, now) // one write, however often queued
	due("[alice/phone@0s]")
	due("[]")
	r.set("alice", "phone", until.Add(time.Hour), now.Add(time.Hour), tokenProof{}, now)
	due("[]")
	r.set("alice", "phone", until.Add(journalStep), now.Add(journalStep), tokenProof{}, now)
	due("[alice/phone@24h0m0s]")

	r.set("bob", "tablet", until, now, tokenProof{}, now)
	e := r.takeDirty(1)
	r.failed(e[0])
	due("[bob/tablet@0s]")

	r.set("carol", "phone", until, now, tokenProof{}, now)
	r.revoke("carol", "phone", now.Add(time.Minute), now.Add(-DefaultTrustFor), time.Hour)
	r.set("dave", "phone", until, now, tokenProof{}, now)
	r.journaled("dave", "phone", until)
	if len(r.dirty) != 1 { // carol's, revoked; dave's key taken back
		t.Errorf("dirty keys %q after an enrolment read back from the journal, want carol's alone", r.dirty)
	}
	due("[]")
	if len(r.dirty) != 0 {
		t.Errorf("dirty keys %q left after a pass", r.dirty)
	}
}
