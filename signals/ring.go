package signals

import "math"

// ring counts events in len(c) consecutive time slots of a fixed width: it
// holds the slots (head-len(c), head], head being the newest slot index
// seen. A slot index is an event's Unix time in nanoseconds divided by the
// slot width (floorDiv). Moving head forward recycles (zeroes) the slots
// that fall out; an event for a slot already recycled is dropped.
type ring struct {
	c    []uint32
	head int64
	sum  uint64 // the sum of c
	used bool   // head is valid
}

// init sizes the ring to n slots and empties it, reusing c when it can.
func (r *ring) init(n int) {
	if cap(r.c) >= n {
		r.c = r.c[:n]
		clear(r.c)
	} else {
		r.c = make([]uint32, n)
	}
	r.head, r.sum, r.used = 0, 0, false
}

// reset empties the ring.
func (r *ring) reset() {
	clear(r.c)
	r.head, r.sum, r.used = 0, 0, false
}

// add counts one event in slot s. It reports false, counting nothing, when
// s is older than the oldest slot the ring holds.
func (r *ring) add(s int64) bool {
	n := int64(len(r.c))
	switch {
	case !r.used:
		r.used = true
		r.head = s
	case s > r.head:
		if s-r.head >= n {
			clear(r.c)
			r.sum = 0
		} else {
			// recycle the slots head+1..s, stepping j instead of taking
			// each one's modulo
			j := slotMod(r.head+1, n)
			for k := r.head + 1; k <= s; k++ {
				r.sum -= uint64(r.c[j])
				r.c[j] = 0
				if j++; j == n {
					j = 0
				}
			}
		}
		r.head = s
	case s <= r.head-n:
		return false
	}
	j := slotMod(s, n)
	if r.c[j] < math.MaxUint32 {
		r.c[j]++
		r.sum++
	}
	return true
}

// clearTo empties the slots the ring holds up to slot s, keeping the
// later ones.
func (r *ring) clearTo(s int64) {
	if !r.used {
		return
	}
	n := int64(len(r.c))
	if s >= r.head {
		r.reset()
		return
	}
	lo := r.head - n + 1
	if s < lo {
		return
	}
	j := slotMod(lo, n)
	for i := lo; i <= s; i++ {
		r.sum -= uint64(r.c[j])
		r.c[j] = 0
		if j++; j == n {
			j = 0
		}
	}
}

// countTo returns the events in the k slots (to-k, to] that the ring still
// holds. It does not change the ring.
func (r *ring) countTo(to, k int64) uint64 {
	if !r.used {
		return 0
	}
	n := int64(len(r.c))
	lo := max(to-k+1, r.head-n+1)
	hi := min(to, r.head)
	var sum uint64
	if lo > hi {
		return 0
	}
	j := slotMod(lo, n)
	for i := lo; i <= hi; i++ {
		sum += uint64(r.c[j])
		if j++; j == n {
			j = 0
		}
	}
	return sum
}

// floorDiv returns floor(a/b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// slotMod returns i modulo n in [0, n).
func slotMod(i, n int64) int64 {
	j := i % n
	if j < 0 {
		j += n
	}
	return j
}
