package signals

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/streams"
)

// TestEvictionsCounted fills every structure past MaxKeys by rotating
// accounts: each entry evicted for room is counted in Stats.Evicted, and a
// lockout still in force that leaves the measures (riskd would no longer
// re-assert it) is counted apart, so that the loss is never silent.
func TestEvictionsCounted(t *testing.T) {
	t.Parallel()
	const maxKeys = 100
	e := New(fullOptions(maxKeys))
	for i := range 5 { // lock out the victim (5 failures, 15m)
		e.ApplyReport(0, 0, &streams.Report{Type: streams.ReportLoginFailed, TS: sec(float64(i)), Account: "victim"}, nil)
	}
	if s := summary(e.Active(sec(5))); s != joinSummary([]string{"SetLock account/victim lockout"}) {
		t.Fatalf("Active after the victim's failures: %s", s)
	}
	// The attacker locks out maxKeys other accounts, all within the
	// victim's 15 minutes: 500 reports.
	n := 0
	for a := range maxKeys {
		for range 5 {
			ts := at(10*time.Second + time.Duration(n)*time.Millisecond)
			e.ApplyReport(0, 0, &streams.Report{Type: streams.ReportLoginFailed, TS: ts, Account: "rot-" + itoa(int64(a))}, nil)
			n++
		}
	}
	s := e.Stats()
	checkBound(t, s, maxKeys)
	if s.Evicted.Measures == 0 || s.Evicted.MeasuresInForce == 0 {
		t.Fatalf("stats %+v: %d lockouts on a bound of %d measures evicted none, or counted none in force", s, maxKeys+1, maxKeys)
	}
	if s.Evicted.Velocity == 0 {
		t.Fatalf("stats %+v: %d accounts on a bound of %d velocity counters evicted none", s, maxKeys+1, maxKeys)
	}
	if s.Evicted.MeasuresInForce > s.Evicted.Measures || s.Evicted.Measures != uint64(maxKeys+1-s.Measures) {
		t.Fatalf("stats %+v: want %d measures evicted, all in force", s, maxKeys+1-s.Measures)
	}
}

// TestFloodKeepsCountsUnderWay: an attacker who guesses at a victim and,
// between guesses, fails once on more fresh accounts than the table
// holds must not reset the victim's count: a counter with two events or
// more outlives the single-event keys of such a flood (lockout at 5:
// 2 guesses, 300 fresh accounts on a table of 100, 3 more guesses).
func TestFloodKeepsCountsUnderWay(t *testing.T) {
	t.Parallel()
	const maxKeys = 100
	e := New(fullOptions(maxKeys))
	fail := func(ts float64, account string) {
		e.ApplyReport(0, 0, &streams.Report{Type: streams.ReportLoginFailed, TS: sec(ts), Account: account}, nil)
	}
	fail(0, "victim")
	fail(1, "victim")
	for i := range 3 * maxKeys {
		fail(2+float64(i)/1000, "fresh-"+itoa(int64(i)))
	}
	for i := range 3 {
		fail(3+float64(i), "victim")
	}
	if s := summary(e.Active(sec(6))); !strings.Contains(s, "SetLock account/victim lockout") {
		t.Fatalf("the victim's 5 failures in the window, a flood of fresh accounts between them: Active = %s; want its lockout", s)
	}
	checkBound(t, e.Stats(), maxKeys)
}

// TestFloodOfPairsKeepsLongerCounts: a flood of fresh accounts failed
// twice each (every counter "under way") no longer evicts a victim's
// longer count: of the least recent counters, the one holding the fewest
// events goes. Before, when all of them were under way the least recent
// went: 600 failures on 300 fresh accounts between the victim's 4th and
// 5th guess wiped the victim's 4 (threshold 5), where failing once each
// did not (TestFloodKeepsCountsUnderWay).
func TestFloodOfPairsKeepsLongerCounts(t *testing.T) {
	t.Parallel()
	const maxKeys = 100
	e := New(fullOptions(maxKeys))
	fail := func(ts float64, account string) {
		e.ApplyReport(0, 0, &streams.Report{Type: streams.ReportLoginFailed, TS: sec(ts), Account: account}, nil)
	}
	for i := range 4 {
		fail(float64(i), "victim")
	}
	for i := range 3 * maxKeys {
		a := "fresh-" + itoa(int64(i))
		fail(5+float64(i)/1000, a)
		fail(5+float64(i)/1000, a)
	}
	fail(6, "victim")
	if s := summary(e.Active(sec(7))); !strings.Contains(s, "SetLock account/victim lockout") {
		t.Fatalf("the victim's 5 failures in the window, a flood of accounts failed twice between them: Active = %s; want its lockout", s)
	}
	checkBound(t, e.Stats(), maxKeys)
}
