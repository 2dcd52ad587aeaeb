package risk

import (
	"strconv"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
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
	r := trustRecord{max: max, m: map[string]trustVal{}, revoked: map[string]revocation{}}
	for i := range max { // an account each: bucket.MaxTrustedDevices bounds one account
		r.set("a"+strconv.Itoa(i), "d", now.Add(time.Hour+time.Duration(i)*time.Second), now, tokenProof{}, now)
	}
	start := time.Now()
	for i := range more {
		r.set("new"+strconv.Itoa(i), "d", now.Add(1000*time.Hour), now, tokenProof{}, now)
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
	if len(r.perAccount) != len(r.m) {
		t.Fatalf("%d accounts counted for %d enrolments of an account each", len(r.perAccount), len(r.m))
	}
	// the enrolments dropped are those ending first: every new one is kept
	for i := range more {
		if _, ok := r.m["new"+strconv.Itoa(i)+"\x00d"]; !ok {
			t.Fatalf("new enrolment %d dropped before older ones ending sooner", i)
		}
	}
}

// TestTrustRevocationsAreCheap: riskd applies every revocation of the
// audit stream under the record's lock and execMu, which its consumers'
// enrolments wait on. A breach answered by revoking the devices of every
// account sends one trust_revoke per account: each scanned the whole
// record of enrolments (500,000 by default), and once the record of
// revocations was full each new one scanned that too, to drop a single
// entry: 2,000 revocations on records of 100,000 looked at 400 million
// entries. A revocation now looks at the enrolments it names (through the
// record's indexes by account and by device), and a full record of
// revocations drops its oldest hundredth at once.
func TestTrustRevocationsAreCheap(t *testing.T) {
	t.Parallel()
	const max, more = 100_000, 2_000
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := trustRecord{max: max, m: map[string]trustVal{}, revoked: map[string]revocation{}}
	for i := range max {
		r.set("a"+strconv.Itoa(i), "phone", now.Add(time.Hour), now, tokenProof{}, now)
	}
	for i := range max { // the record of revocations full of ones in force
		r.revoke("gone"+strconv.Itoa(i), "", now.Add(time.Duration(i)), now, 0)
	}
	r.examined = 0
	for i := range more {
		a := "a" + strconv.Itoa(i)
		switch i % 3 {
		case 0: // one device of an account
			r.revoke(a, "phone", now.Add(time.Minute), now, 0)
		case 1: // every device of an account
			r.revoke(a, "", now.Add(time.Minute), now, 0)
		default: // a freed id nobody else holds
			r.revoke("", "tablet"+strconv.Itoa(i), now.Add(time.Minute), now, 0)
		}
		if held, want := r.holds(a, "phone", now.Add(time.Hour)), i%3 == 2; held != want {
			t.Fatalf("after revocation %d %s's phone held %v, want %v", i, a, held, want)
		}
	}
	// each revocation looks at what it drops, and a full record of
	// revocations a pass over both records per hundredth it drops
	if budget := uint64(more + (more/(max/100)+1)*2*max); r.examined > budget {
		t.Fatalf("%d revocations looked at %d entries, want at most %d", more, r.examined, budget)
	}
	if n := len(r.revoked); n > max {
		t.Fatalf("%d revocations recorded, over %d", n, max)
	}
	if n := len(r.active(now)); n != max-more+more/3 {
		t.Fatalf("%d enrolments in force, want %d", n, max-more+more/3)
	}
	// the newest revocations are kept: none of them is trusted again
	if r.set("a1", "phone", now.Add(2*time.Hour), now.Add(time.Minute), tokenProof{}, now) {
		t.Fatal("an enrolment a kept revocation covers was recorded again")
	}
}

// TestTrustRecordBoundPerAccount: an attacker who logs the ids one phone
// minted in to an account of his own enrolled each in riskd's record,
// which is bounded only as a whole (MaxTrust): 150 of them in one
// account evicted the owner's phone of another account from a record of
// 150, so a Redis that lost its trust sets got the attacker's devices
// back and not the owner's. An account now holds at most
// bucket.MaxTrustedDevices entries in the record, as in the store: the
// rest are counted and not recorded, an enrolment the account already
// holds is still renewed, and a device is recorded again once one of the
// account's entries ends.
func TestTrustRecordBoundPerAccount(t *testing.T) {
	t.Parallel()
	const minted = 150
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := trustRecord{max: minted, m: map[string]trustVal{}, revoked: map[string]revocation{}}
	if !r.set("alice", "alice-phone", now.Add(30*24*time.Hour), now, tokenProof{}, now) {
		t.Fatal("alice's phone refused")
	}
	for i := range minted {
		// the first ends first: the attacker's enrolments would outlast
		// alice's under an eviction by end alone
		if !r.set("mallory", "minted-"+strconv.Itoa(i), now.Add(40*24*time.Hour+time.Duration(i)*time.Second), now, tokenProof{}, now) {
			t.Fatalf("minted id %d refused: the store must still be told", i)
		}
	}
	if !r.holds("alice", "alice-phone", now.Add(30*24*time.Hour)) {
		t.Fatal("alice's phone was evicted by another account's enrolments")
	}
	if n, want := r.perAccount["mallory"], bucket.MaxTrustedDevices; n != want || len(r.m) != want+1 {
		t.Fatalf("mallory holds %d entries (record %d), want %d (record %d)", n, len(r.m), want, want+1)
	}
	if r.evicted != minted-bucket.MaxTrustedDevices {
		t.Fatalf("evicted %d, want %d (the devices past the account's bound)", r.evicted, minted-bucket.MaxTrustedDevices)
	}
	// renewed: an entry the account holds
	r.set("mallory", "minted-0", now.Add(50*24*time.Hour), now.Add(time.Hour), tokenProof{}, now)
	if !r.holds("mallory", "minted-0", now.Add(50*24*time.Hour)) {
		t.Fatal("an enrolment the account holds was not renewed")
	}
	// one of the account's entries revoked: a new device takes its room
	r.revoke("mallory", "minted-1", now.Add(2*time.Hour), now, 0)
	if !r.set("mallory", "minted-new", now.Add(50*24*time.Hour), now.Add(3*time.Hour), tokenProof{}, now) || !r.holds("mallory", "minted-new", now.Add(50*24*time.Hour)) {
		t.Fatal("a new device of the account was not recorded once one of its entries went")
	}
	if n := r.perAccount["mallory"]; n != bucket.MaxTrustedDevices {
		t.Fatalf("mallory holds %d entries, want %d", n, bucket.MaxTrustedDevices)
	}
	// every entry ended: the account's count goes with them
	if n := len(r.active(now.Add(60 * 24 * time.Hour))); n != 0 || len(r.perAccount) != 0 {
		t.Fatalf("after every end: %d in force, %d accounts counted, want none", n, len(r.perAccount))
	}
}
