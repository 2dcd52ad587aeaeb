package signals

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// TestLRUModel runs random adds, gets, peeks and removes on an lru bounded
// to 300 keys and on a plain model (a slice, most recent first): after
// every step they hold the same keys in the same order, and every key
// held is found while no other is.
func TestLRUModel(t *testing.T) {
	t.Parallel()
	const bound = 300
	tab := newLRU[int](bound)
	var model []string // most recent first
	rng := rand.New(rand.NewPCG(7, 11))
	for step := 0; step < 30_000; step++ {
		k := "device:" + strconv.Itoa(rng.IntN(500))
		at := slices.Index(model, k)
		switch op := rng.IntN(10); {
		case op < 4:
			e := tab.getBytes([]byte(k))
			if (e != nil) != (at >= 0) {
				t.Fatalf("step %d: get(%q) = %v, model has it: %v", step, k, e, at >= 0)
			}
			if e == nil {
				e = tab.add(k)
				if len(model) >= bound {
					model = model[:bound-1]
				}
			} else {
				model = slices.Delete(model, at, at+1)
			}
			e.val = step
			model = slices.Insert(model, 0, k)
		case op < 8:
			if e := tab.peek(k); (e != nil) != (at >= 0) || (e != nil && e.key != k) {
				t.Fatalf("step %d: peek(%q) = %v, model has it: %v", step, k, e, at >= 0)
			}
		default:
			if e := tab.peekBytes([]byte(k)); e != nil {
				tab.remove(e)
				model = slices.Delete(model, at, at+1)
			}
		}
		if tab.len() != len(model) {
			t.Fatalf("step %d: lru holds %d, model %d", step, tab.len(), len(model))
		}
	}
	var order []string
	for e := tab.root.next; e != &tab.root; e = e.next {
		order = append(order, e.key)
		if tab.peek(e.key) != e {
			t.Fatalf("%q is on the list but not found", e.key)
		}
	}
	if !slices.Equal(order, model) {
		t.Fatalf("order differs from the model:\n%v\n%v", order, model)
	}
}
