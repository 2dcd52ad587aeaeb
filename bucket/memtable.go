package bucket

// memTable is one shard's buckets: an open-addressing hash table (linear
// probing, backward-shift deletion, no tombstones) whose slots hold the
// key's 64-bit hash, where the key's bytes are in the table's arena, and
// the bucket's state inline. A lookup hashes the key once (the caller
// does, and picks the shard from the same hash), reads one slot (more on a
// collision) and compares the key's bytes only when the hash matches. The
// slots and the arena hold no pointers, so the garbage collector never
// scans them. A memTable is not safe for concurrent use (the shard's mutex
// guards it).
type memTable struct {
	slots []memSlot // len is 0 or a power of two
	n     int       // occupied slots
	// arena holds the keys of the occupied slots back to back; dead counts
	// the bytes of removed keys, reclaimed by compact.
	arena []byte
	dead  int
	// cursor is where eviction samples next (it walks the slots in order,
	// so eviction is deterministic).
	cursor int
	// evictedLive counts the buckets evicted before they were full again
	// (their keys' spent tokens forgotten).
	evictedLive uint64
}

// memSlot is one slot of a memTable: hash 0 marks it empty.
type memSlot struct {
	hash     uint64
	off, len uint32 // the key's bytes: arena[off : off+len]
	memBucket
}

// memBucket is one bucket's state: the same two numbers decide.lua stores.
type memBucket struct {
	tokens float64 // micro-tokens, a whole number
	last   float64 // microseconds
	full   float64 // microseconds: when it is full again (eviction order and expiry)
}

// memHash makes h a valid slot hash (0 is the empty slot).
func memHash(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

// home is the slot where a key hashed h starts probing. The low bits of h
// pick the shard, so the slot comes from the others.
func (t *memTable) home(h uint64) int {
	return int((h >> 8) & uint64(len(t.slots)-1))
}

// keyAt returns slot s's key.
func (t *memTable) keyAt(s *memSlot) []byte {
	return t.arena[s.off : s.off+s.len]
}

// find returns the bucket of key (hashed h) or nil. The pointer stays
// valid until the next insert or delete.
func (t *memTable) find(h uint64, key string) *memBucket {
	return t.match(t.probe(h), h, key)
}

// probe returns the first slot holding hash h, or -1 when there is none:
// the first half of find, which reads only slots (a decision probes for
// all its keys first, so that their cache misses overlap, then touches
// and matches).
func (t *memTable) probe(h uint64) int {
	if t.n == 0 {
		return -1
	}
	mask := len(t.slots) - 1
	for i := t.home(h); ; i = (i + 1) & mask {
		switch t.slots[i].hash {
		case 0:
			return -1
		case h:
			return i
		}
	}
}

// touch reads the first and last bytes of slot i's key (none when i < 0
// or the key is empty) and returns their sum: a prefetch of the arena's
// cache lines for match (Go has no prefetch instruction), between probe
// and match.
func (t *memTable) touch(i int) uint8 {
	if i < 0 {
		return 0
	}
	s := &t.slots[i]
	if s.len == 0 {
		return 0
	}
	return t.arena[s.off] + t.arena[s.off+s.len-1]
}

// match returns the bucket of key (hashed h), probing on from slot i, the
// result of probe(h): the second half of find, which compares keys.
func (t *memTable) match(i int, h uint64, key string) *memBucket {
	if i < 0 {
		return nil
	}
	mask := len(t.slots) - 1
	for ; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.hash == 0 {
			return nil
		}
		if s.hash == h && int(s.len) == len(key) && string(t.keyAt(s)) == key {
			return &s.memBucket
		}
	}
}

// put sets key's bucket to b, inserting it when absent. The caller keeps
// n within the shard's bound (evicting first); the table grows so that it
// is at most three quarters full.
func (t *memTable) put(h uint64, key string, b memBucket) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	mask := len(t.slots) - 1
	i := t.home(h)
	for ; t.slots[i].hash != 0; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.hash == h && int(s.len) == len(key) && string(t.keyAt(s)) == key {
			s.memBucket = b
			return
		}
	}
	off := t.appendKey(key)
	s := &t.slots[i] // field by field: a literal would be copied through the stack
	s.hash, s.off, s.len, s.memBucket = h, off, uint32(len(key)), b
	t.n++
}

// appendKey appends key to the arena and returns its offset. A full arena
// is rebuilt at twice its live size plus key (dropping the removed keys on
// the way), so growing copies each key about once.
func (t *memTable) appendKey(key string) uint32 {
	if len(t.arena)+len(key) > cap(t.arena) {
		t.rebuild(2 * (len(t.arena) - t.dead + len(key)))
	}
	off := len(t.arena)
	t.arena = append(t.arena, key...)
	return uint32(off)
}

// rebuild copies the keys of the occupied slots into a new arena of the
// given capacity.
func (t *memTable) rebuild(capacity int) {
	arena := make([]byte, 0, max(capacity, 256))
	for i := range t.slots {
		s := &t.slots[i]
		if s.hash == 0 {
			continue
		}
		off := len(arena)
		arena = append(arena, t.keyAt(s)...)
		s.off = uint32(off)
	}
	t.arena, t.dead = arena, 0
}

// grow doubles the slots (16 at first) and re-inserts every bucket.
func (t *memTable) grow() {
	old := t.slots
	t.slots = make([]memSlot, max(2*len(old), 16))
	mask := len(t.slots) - 1
	for j := range old {
		if old[j].hash == 0 {
			continue
		}
		i := t.home(old[j].hash)
		for t.slots[i].hash != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = old[j]
	}
	t.cursor = 0
}

// deleteAt empties slot i and shifts the slots after it back so that no
// probe sequence is broken. A slot from after i may land in i; no slot
// moves to before i unless the run of occupied slots wraps around the
// end of the table.
func (t *memTable) deleteAt(i int) {
	mask := len(t.slots) - 1
	t.dead += int(t.slots[i].len)
	t.n--
	for {
		t.slots[i] = memSlot{}
		j := i
		for {
			j = (j + 1) & mask
			if t.slots[j].hash == 0 {
				return
			}
			// slot j may fill the hole at i only if its home is not in (i, j]
			k := t.home(t.slots[j].hash)
			if (j > i && (k <= i || k > j)) || (j < i && k <= i && k > j) {
				break
			}
		}
		t.slots[i] = t.slots[j]
		i = j
	}
}

// compact rewrites the arena without the keys of removed buckets once they
// take more room than the live ones (and some: small tables never do).
func (t *memTable) compact() {
	if t.dead < 4096 || t.dead < len(t.arena)-t.dead {
		return
	}
	t.rebuild(2 * (len(t.arena) - t.dead))
}

// sweep removes every bucket full again at now (in microseconds).
func (t *memTable) sweep(now float64) {
	for i := 0; i < len(t.slots); {
		if s := &t.slots[i]; s.hash != 0 && s.full <= now {
			t.deleteAt(i) // the slot now holds one not looked at yet, or is empty
			continue
		}
		i++
	}
	t.compact()
}

// evict removes one bucket: among the next few held, from the eviction
// cursor on, the first already full at now (which changes no decision),
// else the one full again earliest, and of those full again together the
// one with the fewest tokens held. That tie is a calendar quota's: all of
// its keys are full again at the period's end and hold their count used,
// so a rotation of fresh keys (each used once) makes room among its own
// kind before it forgets a spent quota, which is lost only to keys used
// as much (TestAttackRotationRefillsSpentQuota).
func (t *memTable) evict(now float64) {
	const samples = 8
	if t.n == 0 {
		return
	}
	mask := len(t.slots) - 1
	victim, best := -1, 0.0
	i := t.cursor & mask
	for seen := 0; seen < samples && seen < t.n; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.hash == 0 {
			continue
		}
		if s.full <= now {
			victim = i
			break
		}
		if victim < 0 || s.full < best || s.full == best && s.tokens < t.slots[victim].tokens {
			victim, best = i, s.full
		}
		seen++
	}
	t.cursor = (i + 1) & mask
	if t.slots[victim].full > now {
		t.evictedLive++
	}
	t.deleteAt(victim)
	t.compact()
}
