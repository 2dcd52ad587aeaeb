package replay

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestReorder: events up to the window out of order come out in time
// order (ties in arrival order); the output depends on the input alone.
func TestReorder(t *testing.T) {
	t.Parallel()
	const window = 100
	rng := rand.New(rand.NewPCG(1, 2))
	var in []event
	for i := range 5000 {
		in = append(in, event{ns: int64(i*10) + rng.Int64N(window), rank: uint8(i % 2)})
	}
	run := func() []event {
		o := reorder{window: window}
		var out []event
		for _, ev := range in {
			out = o.add(ev, out)
		}
		return o.flush(out)
	}
	out := run()
	if len(out) != len(in) {
		t.Fatalf("%d events out of %d", len(out), len(in))
	}
	if !slices.IsSortedFunc(out, byTime) {
		t.Fatal("not in time order")
	}
	if again := run(); !slices.Equal(again, out) {
		t.Fatal("two runs differ")
	}
	// an event later than the window is released where it arrived
	o := reorder{window: window}
	var late []event
	for i := range 1000 {
		late = o.add(event{ns: int64(i * 10)}, late)
	}
	late = o.add(event{ns: 5}, late)
	late = o.flush(late)
	if len(late) != 1001 || slices.IsSortedFunc(late, byTime) {
		t.Fatalf("late event: %d events, sorted %v", len(late), slices.IsSortedFunc(late, byTime))
	}
}

// TestReorderSortMerge: sorting only the events added since the last
// release and merging them with those held gives the full sort's order.
func TestReorderSortMerge(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 200 {
		n, k := 1+rng.IntN(300), 0
		o := reorder{}
		for i := range n {
			o.buf = append(o.buf, event{ns: rng.Int64N(50), seq: uint64(i + 1)})
		}
		if round%4 != 0 {
			k = rng.IntN(n + 1)
			slices.SortFunc(o.buf[:k], byTime)
		}
		o.sorted = k
		want := slices.Clone(o.buf)
		slices.SortFunc(want, byTime)
		o.sort()
		if !slices.Equal(o.buf, want) {
			t.Fatalf("round %d (n %d, sorted %d): merge differs from a full sort", round, n, k)
		}
	}
}

// TestReorderSortRuns: merging the runs already in order gives the full
// sort's order, for few long runs (merged) and many short ones (sorted).
func TestReorderSortRuns(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	for round := range 300 {
		n, runs := rng.IntN(3000), 1+rng.IntN(100)
		in := make([]event, n)
		for i := range in {
			in[i] = event{ns: rng.Int64N(1000), seq: uint64(i + 1)}
		}
		// cut into runs, each sorted
		for from := 0; from < n; {
			to := min(n, from+1+rng.IntN(2*n/runs+1))
			slices.SortFunc(in[from:to], byTime)
			from = to
		}
		want := slices.Clone(in)
		slices.SortFunc(want, byTime)
		var o reorder
		o.sortRuns(in)
		if !slices.Equal(in, want) {
			t.Fatalf("round %d (n %d, about %d runs): differs from a full sort", round, n, runs)
		}
	}
}
