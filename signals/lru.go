package signals

import (
	"hash/maphash"
	"strings"
	"unsafe"
)

// maxFree is how many removed entries an lru keeps for reuse.
const maxFree = 64

// inlineKey is the longest key an entry holds in its own memory.
const inlineKey = 32

// lru maps string keys to entries and holds at most max of them: adding to
// a full table first evicts the least recently touched entry. Entries are
// kept on a doubly linked list, most recent first, so eviction is exact
// and deterministic (no map iteration, no randomness). A sweep cursor walks
// the list from the least recent entry towards the most recent one, a step
// at a time, so that callers can drop idle entries without a full scan.
//
// The keys are found through an open-addressing table of (hash, entry)
// slots (linear probing, backward-shift deletion): a look-up hashes the key
// once, reads a slot and compares keys only when the hashes match. A new
// entry holds a short key in its own memory, so that the compare reads the
// entry's cache lines and not a third place.
//
// An lru is not safe for concurrent use and must not be copied after newLRU.
type lru[V any] struct {
	slots []lruSlot[V] // len is a power of two, at most three quarters full
	n     int          // entries held
	seed  maphash.Seed
	root  entry[V] // sentinel: root.next is the most recent entry, root.prev the least recent
	max   int
	// cursor is the next entry the sweep looks at; &root means "start over
	// at the least recent entry".
	cursor *entry[V]
	free   []*entry[V]
	// onRemove, when set, is called for every entry leaving the table
	// (evicted, swept or deleted), before it is unlinked.
	onRemove func(*entry[V])
	// onEvict, when set, is called for every entry evicted for room (the
	// table full, or its bound lowered), before onRemove.
	onEvict func(*entry[V])
	// evicted counts the entries evicted for room (not those swept or
	// deleted).
	evicted uint64
	// worth, when set, weighs an entry against the least recent ones:
	// evict takes, of the evictScan least recent entries, the one worth
	// least (the least recent of those), so a flood of fresh keys evicts
	// its own kind first, and keys holding less before keys holding more.
	worth func(*entry[V]) uint64
}

// evictScan bounds how many least recent entries evict looks at.
const evictScan = 8

// entry is one key of an lru.
type entry[V any] struct {
	key  string
	hash uint64 // of key, with the lru's seed
	// inline holds key when the entry was allocated for a key of at most
	// inlineKey bytes. It is written once: a reused entry's key is a copy
	// of its own, so key strings handed out (Offenders) never change.
	inline     [inlineKey]byte
	prev, next *entry[V]
	val        V
}

// lruSlot is one slot of an lru's table: e nil marks it empty.
type lruSlot[V any] struct {
	hash uint64
	e    *entry[V]
}

// newLRU returns an empty table bounded to n entries (at least 1).
func newLRU[V any](n int) *lru[V] {
	t := &lru[V]{slots: make([]lruSlot[V], 16), seed: maphash.MakeSeed(), max: max(n, 1)}
	t.root.next, t.root.prev = &t.root, &t.root
	t.cursor = &t.root
	return t
}

// len returns the number of entries.
func (t *lru[V]) len() int { return t.n }

// find returns the entry of key, hashed h, or nil.
func (t *lru[V]) find(h uint64, key string) *entry[V] {
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.e == nil {
			return nil
		}
		if s.hash == h && s.e.key == key {
			return s.e
		}
	}
}

// get returns the entry of key, marking it most recently used, or nil.
func (t *lru[V]) get(key string) *entry[V] {
	e := t.find(maphash.String(t.seed, key), key)
	if e != nil {
		t.touch(e)
	}
	return e
}

// getBytes is get for a key held in a byte slice; it does not allocate.
func (t *lru[V]) getBytes(key []byte) *entry[V] {
	e := t.peekBytes(key)
	if e != nil {
		t.touch(e)
	}
	return e
}

// peek returns the entry of key without marking it used, or nil.
func (t *lru[V]) peek(key string) *entry[V] { return t.find(maphash.String(t.seed, key), key) }

// peekBytes is peek for a key held in a byte slice.
func (t *lru[V]) peekBytes(key []byte) *entry[V] {
	return t.find(maphash.Bytes(t.seed, key), string(key))
}

// add inserts key, which must be absent, as the most recent entry, evicting
// the least recent entries while the table is full. The key is copied. The
// returned entry's val is the zero value or a removed entry's old value:
// the caller re-initialises it (and may reuse its buffers).
func (t *lru[V]) add(key string) *entry[V] {
	return t.insert(key)
}

// addBytes is add for a key held in a byte slice.
func (t *lru[V]) addBytes(key []byte) *entry[V] {
	return t.insert(unsafe.String(unsafe.SliceData(key), len(key)))
}

// insert is add; key may alias the caller's memory (it is copied).
func (t *lru[V]) insert(key string) *entry[V] {
	for t.n >= t.max && t.root.prev != &t.root {
		t.evict()
	}
	var e *entry[V]
	if n := len(t.free); n > 0 {
		e = t.free[n-1]
		t.free[n-1] = nil
		t.free = t.free[:n-1]
		e.key = strings.Clone(key)
	} else {
		e = new(entry[V])
		e.key = e.keep(key)
	}
	e.hash = maphash.String(t.seed, e.key)
	t.index(e)
	t.linkFront(e)
	return e
}

// index adds e to the table, growing it past three quarters full.
func (t *lru[V]) index(e *entry[V]) {
	if (t.n+1)*4 > len(t.slots)*3 {
		old := t.slots
		t.slots = make([]lruSlot[V], 2*len(old))
		for _, s := range old {
			if s.e != nil {
				t.place(s)
			}
		}
	}
	t.place(lruSlot[V]{hash: e.hash, e: e})
	t.n++
}

// place puts s in the first free slot of its probe sequence.
func (t *lru[V]) place(s lruSlot[V]) {
	mask := uint64(len(t.slots) - 1)
	i := s.hash & mask
	for t.slots[i].e != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = s
}

// unindex removes e from the table: it empties e's slot and shifts the
// slots after it back so that no probe sequence is broken.
func (t *lru[V]) unindex(e *entry[V]) {
	mask := uint64(len(t.slots) - 1)
	i := e.hash & mask
	for t.slots[i].e != e {
		i = (i + 1) & mask
	}
	t.n--
	for {
		t.slots[i] = lruSlot[V]{}
		j := i
		for {
			j = (j + 1) & mask
			if t.slots[j].e == nil {
				return
			}
			// slot j may fill the hole at i only if its home is not in (i, j]
			k := t.slots[j].hash & mask
			if (j > i && (k <= i || k > j)) || (j < i && k <= i && k > j) {
				break
			}
		}
		t.slots[i] = t.slots[j]
		i = j
	}
}

// keep returns a copy of key for a new entry: in e.inline when it fits.
func (e *entry[V]) keep(key string) string {
	if len(key) == 0 || len(key) > inlineKey {
		return strings.Clone(key)
	}
	copy(e.inline[:], key)
	return unsafe.String(&e.inline[0], len(key))
}

// remove deletes e from the table.
func (t *lru[V]) remove(e *entry[V]) {
	if t.onRemove != nil {
		t.onRemove(e)
	}
	if t.cursor == e {
		t.cursor = e.prev
	}
	e.prev.next = e.next
	e.next.prev = e.prev
	e.prev, e.next = nil, nil
	t.unindex(e)
	e.key = ""
	if len(t.free) < maxFree {
		t.free = append(t.free, e)
	}
}

// touch moves e to the front (most recently used).
func (t *lru[V]) touch(e *entry[V]) {
	if t.root.next == e {
		return
	}
	if t.cursor == e {
		t.cursor = e.prev
	}
	e.prev.next = e.next
	e.next.prev = e.prev
	t.linkFront(e)
}

func (t *lru[V]) linkFront(e *entry[V]) {
	e.prev = &t.root
	e.next = t.root.next
	t.root.next.prev = e
	t.root.next = e
}

// sweepNext returns the entry the sweep looks at next (nil when the table
// is empty) and advances the cursor past it. The caller may remove it.
func (t *lru[V]) sweepNext() *entry[V] {
	e := t.cursor
	if e == &t.root {
		e = t.root.prev
		if e == &t.root {
			return nil
		}
	}
	t.cursor = e.prev
	return e
}

// setMax changes the bound, evicting least recent entries down to it.
func (t *lru[V]) setMax(n int) {
	t.max = max(n, 1)
	for t.n > t.max {
		t.evict()
	}
}

// evict removes the least recent entry for room, counting it, or, with
// worth, the one worth least of the evictScan oldest (the least recent of
// those).
func (t *lru[V]) evict() {
	e := t.root.prev
	if t.worth != nil && e != &t.root {
		best := t.worth(e)
		for c, i := e.prev, 1; best > 0 && i < evictScan && c != &t.root; c, i = c.prev, i+1 {
			if w := t.worth(c); w < best {
				e, best = c, w
			}
		}
	}
	t.evicted++
	if t.onEvict != nil {
		t.onEvict(e)
	}
	t.remove(e)
}

// each calls f for every entry, least recent first. f may remove the entry
// it is given (and no other).
func (t *lru[V]) each(f func(*entry[V])) {
	for e := t.root.prev; e != &t.root; {
		prev := e.prev
		f(e)
		e = prev
	}
}

// clear removes every entry.
func (t *lru[V]) clear() {
	for t.root.prev != &t.root {
		t.remove(t.root.prev)
	}
}
