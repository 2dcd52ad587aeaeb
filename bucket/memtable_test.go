package bucket

import (
	"context"
	"hash/maphash"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// TestMemTableModel runs random puts, finds, sweeps and evictions on a
// memTable and on a Go map side by side: after every step they hold the
// same buckets. Hashes are masked to a few bits so that keys collide, and
// (bits 13) pushed to the last slots so that probe runs wrap around the
// end of the table.
func TestMemTableModel(t *testing.T) {
	t.Parallel()
	for _, bits := range []uint{4, 12, 13, 64} {
		seed := maphash.MakeSeed()
		hash := func(k string) uint64 {
			h := maphash.String(seed, k)
			switch {
			case bits == 13:
				h |= ^uint64(0xfff) // homes in the last 16 slots
			case bits < 64:
				h &= (1 << bits) - 1
			}
			return memHash(h)
		}
		rng := rand.New(rand.NewPCG(1, uint64(bits)))
		var tab memTable
		model := map[string]memBucket{}
		for step := 0; step < 20_000; step++ {
			k := "{device:" + strconv.Itoa(rng.IntN(600)) + "}:b:d"
			switch op := rng.IntN(100); {
			case op < 60:
				b := memBucket{tokens: float64(step), last: float64(step), full: float64(rng.IntN(1000))}
				if len(model) >= 400 {
					if _, ok := model[k]; !ok {
						continue // the store evicts first; evictions are checked below
					}
				}
				tab.put(hash(k), k, b)
				model[k] = b
			case op < 98:
				got := tab.find(hash(k), k)
				want, ok := model[k]
				if (got != nil) != ok || (ok && *got != want) {
					t.Fatalf("bits %d step %d: find(%q) = %v, want %v %v", bits, step, k, got, want, ok)
				}
			case op < 99:
				now := float64(rng.IntN(1000))
				tab.sweep(now)
				for mk, b := range model {
					if b.full <= now {
						delete(model, mk)
					}
				}
			default:
				before := tab.n
				tab.evict(float64(rng.IntN(1000)))
				if tab.n != before-1 && before > 0 {
					t.Fatalf("bits %d step %d: evict left %d of %d", bits, step, tab.n, before)
				}
				for mk := range model {
					if tab.find(hash(mk), mk) == nil {
						delete(model, mk)
					}
				}
			}
			if tab.n != len(model) {
				t.Fatalf("bits %d step %d: table holds %d, model %d", bits, step, tab.n, len(model))
			}
		}
		for mk, want := range model {
			if got := tab.find(hash(mk), mk); got == nil || *got != want {
				t.Fatalf("bits %d: %q = %v, want %v", bits, mk, got, want)
			}
		}
		if live := tab.n; live > 0 && len(tab.arena)-tab.dead <= 0 {
			t.Fatalf("bits %d: arena lost its live keys", bits)
		}
	}
}

// TestMemTableEvictPrefersFull: eviction removes a bucket already full
// before one that is not, and otherwise the one full again earliest.
func TestMemTableEvictPrefersFull(t *testing.T) {
	t.Parallel()
	seed := maphash.MakeSeed()
	var tab memTable
	for i, full := range []float64{50, 20, 5, 70} {
		k := strconv.Itoa(i)
		tab.put(memHash(maphash.String(seed, k)), k, memBucket{full: full})
	}
	tab.evict(10) // bucket 2 is full at 10
	if tab.find(memHash(maphash.String(seed, "2")), "2") != nil || tab.n != 3 {
		t.Fatalf("bucket full at 5 should go first (n = %d)", tab.n)
	}
	tab.evict(10) // none full: the one full again earliest (20)
	if tab.find(memHash(maphash.String(seed, "1")), "1") != nil || tab.n != 2 {
		t.Fatalf("bucket full at 20 should go next (n = %d)", tab.n)
	}
}

// TestMemoryEmptyKey: a bucket whose key is empty (the store takes any
// key) is found again like any other, shared or unshared; the look-up's
// prefetch of the key's bytes once read past an empty key and panicked.
func TestMemoryEmptyKey(t *testing.T) {
	for _, unshared := range []bool{false, true} {
		s := NewMemoryStore(MemoryOptions{})
		if unshared {
			s = NewSingleGoroutineMemoryStore(MemoryOptions{})
		}
		req := Request{Now: time.Unix(1_800_000_000, 0), Cost: 1, Limits: []Limit{{Key: "", Burst: 5, Rate: 1, Period: time.Hour}}}
		var res Result
		for want := 4.0; want >= 2; want-- {
			if err := s.Decide(context.Background(), &req, &res); err != nil || res.Limits[0].Remaining != want {
				t.Fatalf("unshared=%v: remaining %v err=%v, want %v", unshared, res.Limits[0].Remaining, err, want)
			}
		}
	}
}
