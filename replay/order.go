package replay

import (
	"slices"
	"time"

	"github.com/tollgate-dev/tollgate/streams"
)

// Event ranks: at the same time, a decision replays before a report (the
// check comes before the login's outcome). An admin change (rankAudit)
// applies before either at its time (Replayer.Audit).
const (
	rankDecision uint8 = iota
	rankReport
	rankAudit
	rankTrust // an enrolment of riskd's trust journal (seedTrust)
)

// event is one recorded event.
type event struct {
	ns   int64  // event time, Unix ns
	at   int64  // its stream message's timestamp, Unix ns (0: none), which bounds the risk engine's clock
	seq  uint64 // arrival order within its stream
	rank uint8
	d    *streams.Decision
	r    *streams.Report
	a    *streams.Audit
	e    *streams.TrustEnrolment
}

// DefaultReorderWindow is how far out of order (by event time) events of
// one stream may arrive and still be replayed in order: limiter hosts
// publish their batches independently (every 20 ms at most), and reports
// are stamped before they are published.
const DefaultReorderWindow = 2 * time.Second

// reorder puts the events of one stream into event-time order, holding
// back those within window of the newest event seen. It is a function of
// the sequence of events alone, so the order it produces is deterministic;
// an event later than window is released at its place in the sequence.
type reorder struct {
	window int64
	n      uint64 // events added
	buf    []event
	maxNs  int64
	// sorted is how many of buf's first events are in order.
	sorted  int
	scratch []event
	runs    []int // sortRuns: where each run ends
}

// add takes ev and returns the events now released (valid until the next
// call), oldest first.
func (o *reorder) add(ev event, out []event) []event {
	o.n++
	ev.seq = o.n
	o.buf = append(o.buf, ev)
	if ev.ns > o.maxNs {
		o.maxNs = ev.ns
	}
	// Release in bulk, once the buffer spans two windows, so each event
	// is sorted about twice.
	if o.maxNs-o.buf[0].ns < 2*o.window && len(o.buf) < 1<<20 {
		return out
	}
	o.sort()
	cut := len(o.buf)
	for cut > 0 && o.buf[cut-1].ns > o.maxNs-o.window {
		cut--
	}
	if cut == 0 && len(o.buf) >= 1<<20 {
		cut = len(o.buf) / 2 // a burst: bound the buffer
	}
	out = append(out, o.buf[:cut]...)
	n := copy(o.buf, o.buf[cut:])
	clear(o.buf[n:])
	o.buf = o.buf[:n]
	o.sorted = n
	return out
}

// flush returns every event held, oldest first.
func (o *reorder) flush(out []event) []event {
	o.sort()
	out = append(out, o.buf...)
	clear(o.buf)
	o.buf = o.buf[:0]
	o.sorted = 0
	return out
}

// sort orders the buffer by time; equal times keep arrival order. A
// buffer already in order (one publisher) costs one pass. The events held
// back by the last release are in order already: only those added since
// are sorted (sortRuns), then merged with them.
func (o *reorder) sort() {
	k := min(o.sorted, len(o.buf))
	tail := o.buf[k:]
	o.sortRuns(tail)
	if k > 0 && len(tail) > 0 && byTime(o.buf[k-1], tail[0]) > 0 {
		o.merge(k)
	}
	o.sorted = len(o.buf)
}

// sortRuns orders s. Events arrive in runs already in order (one message's
// decisions, one publisher's batches), so it merges the runs pairwise,
// about log2(runs) passes; many short runs (no such structure) are sorted.
func (o *reorder) sortRuns(s []event) {
	o.runs = o.runs[:0]
	for i := 1; i < len(s); i++ {
		if s[i-1].ns > s[i].ns || s[i-1].ns == s[i].ns && s[i-1].seq > s[i].seq {
			o.runs = append(o.runs, i)
		}
	}
	switch {
	case len(o.runs) == 0:
		return
	case len(o.runs) > len(s)/16:
		slices.SortFunc(s, byTime)
		return
	}
	o.runs = append(o.runs, len(s))
	o.scratch = append(o.scratch[:0], s...)
	src, dst := o.scratch, s
	for len(o.runs) > 1 {
		from, n := 0, 0
		for i := 0; i < len(o.runs); i += 2 {
			if i+1 == len(o.runs) {
				copy(dst[from:], src[from:o.runs[i]])
			} else {
				mergeInto(dst[from:o.runs[i+1]], src[from:o.runs[i]], src[o.runs[i]:o.runs[i+1]])
			}
			from = o.runs[min(i+1, len(o.runs)-1)]
			o.runs[n] = from
			n++
		}
		o.runs = o.runs[:n]
		src, dst = dst, src
	}
	if &src[0] != &s[0] {
		copy(s, src)
	}
	clear(o.scratch)
}

// mergeInto merges the ordered a and b into dst (len(a)+len(b) long).
func mergeInto(dst, a, b []event) {
	i, j := 0, 0
	for n := range dst {
		if j == len(b) || i < len(a) && byTime(a[i], b[j]) <= 0 {
			dst[n] = a[i]
			i++
		} else {
			dst[n] = b[j]
			j++
		}
	}
}

// merge merges the ordered runs buf[:k] and buf[k:] in place.
func (o *reorder) merge(k int) {
	o.scratch = append(o.scratch[:0], o.buf[:k]...)
	a, i, j := o.scratch, 0, k
	for n := range o.buf {
		if i < len(a) && (j == len(o.buf) || byTime(a[i], o.buf[j]) <= 0) {
			o.buf[n] = a[i]
			i++
		} else {
			o.buf[n] = o.buf[j]
			j++
		}
		if i == len(a) {
			break // the rest of buf[j:] is in place
		}
	}
	clear(o.scratch)
}

// byTime orders by event time, then arrival.
func byTime(a, b event) int {
	switch {
	case a.ns < b.ns:
		return -1
	case a.ns > b.ns:
		return 1
	case a.seq < b.seq:
		return -1
	case a.seq > b.seq:
		return 1
	}
	return 0
}

// before reports whether a replays before b when merging streams.
func before(a, b *event) bool {
	if a.ns != b.ns {
		return a.ns < b.ns
	}
	return a.rank < b.rank
}
