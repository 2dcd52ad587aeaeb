package risk

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/signals"
)

// TestTrustRecord: the record keeps the latest end of each enrolment,
// forgets expired ones, and when full drops an expired entry, else the
// one that ends first.
func TestTrustRecord(t *testing.T) {
	t.Parallel()
	now := time.Unix(1700000000, 0)
	r := trustRecord{max: 2, m: map[string]trustVal{}, revoked: map[string]revocation{}}
	r.set("alice", "phone", now.Add(time.Hour), now, tokenProof{}, now)
	r.set("alice", "phone", now.Add(time.Minute), now, tokenProof{}, now) // an earlier end does not shorten it
	r.set("bob", "tablet", now.Add(2*time.Hour), now, tokenProof{}, now)
	r.set("carol", "watch", now.Add(3*time.Hour), now, tokenProof{}, now) // full: alice's phone ends first
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

// TestTrustRecordRevocations: a revocation drops the enrolments made at
// or before it (of one device of an account, of every device of an
// account, of a freed id in every account) and no enrolment that old is
// recorded again; one made after it is.
func TestTrustRecordRevocations(t *testing.T) {
	t.Parallel()
	now := time.Unix(1700000000, 0)
	// steps of 2 min: more than revokeSkew apart
	at := func(m int) time.Time { return now.Add(time.Duration(m) * 2 * time.Minute) }
	r := trustRecord{max: 10, m: map[string]trustVal{}, revoked: map[string]revocation{}}
	r.set("alice", "phone", at(60), at(1), tokenProof{}, now)
	r.set("alice", "tablet", at(60), at(1), tokenProof{}, now)
	r.set("bob", "phone", at(60), at(1), tokenProof{}, now)
	if got := r.revoke("alice", "phone", at(2), now, 0); len(got) != 1 || got[0].account != "alice" || got[0].device != "phone" {
		t.Fatalf("revoke(alice, phone) dropped %v, want alice's phone", got)
	}
	if r.set("alice", "phone", at(61), at(1), tokenProof{}, now) {
		t.Fatal("an enrolment older than its revocation was recorded again")
	}
	if !r.set("alice", "phone", at(63), at(3), tokenProof{}, now) {
		t.Fatal("an enrolment after the revocation was refused")
	}
	// a revocation of every device, or of a freed id, drops at the
	// record's reads and passes (active): what is left in force
	inForce := func() string {
		var out []string
		for _, e := range r.active(now) {
			out = append(out, e.account+"/"+e.device)
		}
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	r.revoke("alice", "", at(2), now, 0)
	if got, want := inForce(), "alice/phone bob/phone"; got != want || r.holds("alice", "tablet", at(60)) {
		t.Fatalf("after revoke(alice, all) at t+2: %q in force, want %q (the tablet goes, the phone came back at t+3)", got, want)
	}
	r.revoke("", "phone", at(4), now, 0)
	if got := inForce(); got != "" {
		t.Fatalf("after revoke(every account, phone): %q in force, want none", got)
	}
	if r.set("carol", "phone", at(64), at(4), tokenProof{}, now) || !r.set("carol", "phone", at(65), at(5), tokenProof{}, now) {
		t.Fatal("a freed id: an enrolment of its time must be refused, a later one recorded")
	}
	if n := len(r.active(now)); n != 1 {
		t.Fatalf("%d enrolments in force, want 1 (carol's phone)", n)
	}
}

// TestTrustRevocationAcrossHostClocks: a login_succeeded is stamped by
// the limiter host that took it, a revocation by the host that made it,
// and their clocks may be apart by up to MaxClockSkew. The thief's login
// on a host 5 s ahead, taken before the revocation, is stamped 3 s after
// it: before, the revocation kept that enrolment in the record (riskd
// wrote it back after a Redis loss) and, read after the revocation (a
// riskd behind, or started later), recorded it again. A revocation now
// covers the enrolments stamped up to MaxClockSkew after it; a login a
// minute and more later is recorded.
func TestTrustRevocationAcrossHostClocks(t *testing.T) {
	t.Parallel()
	now := time.Unix(1700000000, 0)
	ts := now.Add(time.Minute) // the revocation, by host A's clock
	r := trustRecord{max: 10, m: map[string]trustVal{}, revoked: map[string]revocation{}}
	r.set("alice", "phone", now.Add(time.Hour), ts.Add(3*time.Second), tokenProof{}, now) // host B, 5 s ahead, 2 s before
	if got := r.revoke("alice", "phone", ts, now, 0); len(got) != 1 {
		t.Fatalf("the revocation dropped %v, want alice's phone stamped 3 s after it by a host ahead", got)
	}
	if r.set("alice", "phone", now.Add(time.Hour), ts.Add(3*time.Second), tokenProof{}, now) {
		t.Fatal("the same login read again after the revocation was recorded")
	}
	r.set("bob", "tablet", now.Add(time.Hour), ts.Add(3*time.Second), tokenProof{}, now)
	if r.revoke("", "tablet", ts, now, 0); r.holds("bob", "tablet", now.Add(time.Hour)) {
		t.Fatal("a freed id: the login stamped 3 s after it by a host ahead was kept")
	}
	if !r.set("alice", "phone", now.Add(2*time.Hour), ts.Add(signals.MaxClockSkew+time.Second), tokenProof{}, now) {
		t.Fatal("a login more than MaxClockSkew after the revocation was refused")
	}
}

// TestTokenJudgedWithValidForAtRevocation: a login's device token is
// known by its expiry, and its issue was taken as that expiry less the
// policy's valid_for as it is now: once valid_for was lowered (24h to
// 1h) after a stolen phone's revocation, the token the thief held from
// before it (issued 2h before, expiring 22h after) looked issued 21h
// after the revocation, and trusted the phone again. A revocation now
// keeps the valid_for in force when riskd read it, and a token expiring
// within the longer of that and today's is refused; one issued after the
// revocation under the lowered valid_for trusts once its expiry passes
// that bound (the device's renewals), and a valid_for raised since
// counts too.
func TestTokenJudgedWithValidForAtRevocation(t *testing.T) {
	t.Parallel()
	ts := time.Unix(1700000000, 0)
	r := trustRecord{max: 10, m: map[string]trustVal{}, revoked: map[string]revocation{}}
	r.revoke("alice", "phone", ts, ts, 24*time.Hour)
	r.revoke("bob", "phone", ts, ts, time.Hour)
	login := ts.Add(3 * time.Hour) // past the revocation's skew
	for _, c := range []struct {
		what    string
		account string
		tok     tokenProof
		trusted bool
	}{
		{"alice: the thief's token from before, valid_for lowered to 1h since", "alice", tokenProof{ts.Add(22 * time.Hour), time.Hour}, false},
		{"alice: a token issued after, under the lowered valid_for", "alice", tokenProof{ts.Add(4 * time.Hour), time.Hour}, false},
		{"alice: a renewal past the bound", "alice", tokenProof{ts.Add(24*time.Hour + time.Second), time.Hour}, true},
		{"bob: a token from before, valid_for raised to 24h since", "bob", tokenProof{ts.Add(20 * time.Hour), 24 * time.Hour}, false},
		{"bob: a token issued after under 24h", "bob", tokenProof{ts.Add(25 * time.Hour), 24 * time.Hour}, true},
	} {
		if got := r.set(c.account, "phone", login.Add(30*24*time.Hour), login, c.tok, login); got != c.trusted {
			t.Errorf("%s: trusted %v, want %v", c.what, got, c.trusted)
		}
	}
}
