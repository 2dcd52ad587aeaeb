package bucket

import (
	"context"
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// memShards is the number of independently locked shards of a MemoryStore.
const memShards = 64

// DefaultMaxKeys is the MemoryStore's default bound on buckets.
const DefaultMaxKeys = 1 << 20

// MemoryOptions configures a MemoryStore.
type MemoryOptions struct {
	// MaxKeys bounds the number of buckets held (default DefaultMaxKeys).
	// When a shard is full, a new bucket evicts the sampled bucket that was
	// full again earliest: an already full bucket first (which changes no
	// decision), else the one closest to full, and of those full again at
	// once (a calendar quota's keys) the one that used least.
	MaxKeys int
	// MaxLeases bounds the concurrency leases held (default MaxKeys/4, at
	// least 1024; about 365 bytes each), each of the 64 shards a 64th of
	// it: a lease not released lives its lease_ttl, so without a bound
	// they grew with the request rate times the TTL. When a shard is full
	// (its expired leases swept), a decision that would add a lease there
	// is denied, with a Retry-After until the shard's first lease expires,
	// and counted (LeasesRefused): no lease held is ever dropped, which
	// would free a slot of its key.
	MaxLeases int
	// MaxSubjects bounds the subjects with multipliers and the locks held,
	// each (default MaxKeys/4, at least 1024). Expired entries go first.
	MaxSubjects int
	// Now is the clock for requests without Request.Now and for every
	// expiry the subject-level operations judge (default time.Now).
	Now func() time.Time
	// Prefix starts every key the store builds (default DefaultPrefix),
	// as RedisOptions.Prefix.
	Prefix string
}

// MemoryStore is the in-process Store: the same semantics as RedisStore,
// for one process. It is safe for concurrent use (unless made by
// NewSingleGoroutineMemoryStore);
// decisions on distinct shards run in parallel. The zero value is not
// usable; use NewMemoryStore.
type MemoryStore struct {
	seed        maphash.Seed
	prefix      string
	now         func() time.Time
	maxPerShard int
	maxSubjects int
	maxLeases   int // per shard
	refused     atomic.Uint64
	unshared    bool // made by NewSingleGoroutineMemoryStore: Decide takes no locks
	shards      [memShards]memShard

	mu    sync.RWMutex // guards mults, locks, lockRules, trusts and trustedBy
	mults map[string]map[string]Multiplier
	locks map[string]Lock
	// lockRules names, per subject lock key, the rules that keep a lock
	// of their own on the subject (Lock.Own), as the Redis store's rule set.
	lockRules map[string]map[string]struct{}
	trusts    map[string]map[string]time.Time // trust key -> device -> until
	// trustedBy indexes trusts by device (device -> the trust keys that
	// hold it), as the Redis store's device index: UntrustDevice finds a
	// freed id's accounts without a pass over every trust set.
	trustedBy map[string]map[string]struct{}
	// setAt is when each lock (by key) and multiplier (key "|" source)
	// was set, for listings (ListLocks, ListMultipliers).
	setAt map[string]time.Time
	// sweepNext is when the first entry the last sweep left expires (zero:
	// not known): a full table sweeps for room only from then on.
	sweepNext time.Time
}

// trustedLocked reports whether lock l (the i-th of req) exempts req's
// device; s.mu must be held.
func (s *MemoryStore) trustedLocked(l Lock, req *Request, i int, now float64) bool {
	if !l.Exempt || req.Device == "" || i >= len(req.TrustKeys) || req.TrustKeys[i] == "" {
		return false
	}
	until, ok := s.trusts[req.TrustKeys[i]][req.Device]
	return ok && float64(until.UnixMicro()) > now
}

// ownLocked reports whether req's device is in req.OwnTrust at now, so
// that its limits with an OwnKey take from that key (7.1); s.mu must be
// held.
func (s *MemoryStore) ownLocked(req *Request, now float64) bool {
	if req.OwnTrust == "" || req.Device == "" {
		return false
	}
	until, ok := s.trusts[req.OwnTrust][req.Device]
	return ok && float64(until.UnixMicro()) > now
}

// limitKey is the bucket limit l takes from: its OwnKey when trusted.
func limitKey(l *Limit, trusted bool) string {
	if trusted && l.OwnKey != "" {
		return l.OwnKey
	}
	return l.Key
}

type memShard struct {
	mu      sync.Mutex
	buckets memTable
	leases  map[string]leaseSet // concurrency sets by key (nil until one is made)
	nleases int                 // leases held in leases (expired ones until swept)
	// leaseNext is when (µs) the first lease left by the last sweep of a
	// full shard expires: no sweep before it can free one.
	leaseNext float64
	_         [16]byte // keep shards on separate cache lines (128 bytes each)
}

// NewMemoryStore returns a MemoryStore with opts applied.
func NewMemoryStore(opts MemoryOptions) *MemoryStore {
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = DefaultMaxKeys
	}
	if opts.MaxSubjects <= 0 {
		opts.MaxSubjects = max(opts.MaxKeys/4, 1024)
	}
	if opts.MaxLeases <= 0 {
		opts.MaxLeases = max(opts.MaxKeys/4, 1024)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	s := &MemoryStore{
		seed:        maphash.MakeSeed(),
		prefix:      opts.Prefix,
		now:         opts.Now,
		maxPerShard: max(opts.MaxKeys/memShards, 1),
		maxSubjects: opts.MaxSubjects,
		maxLeases:   max(opts.MaxLeases/memShards, 1),
		mults:       make(map[string]map[string]Multiplier),
		locks:       make(map[string]Lock),
		lockRules:   make(map[string]map[string]struct{}),
		trusts:      make(map[string]map[string]time.Time),
		trustedBy:   make(map[string]map[string]struct{}),
		setAt:       make(map[string]time.Time),
	}
	return s
}

// NewSingleGoroutineMemoryStore returns a MemoryStore with opts applied
// for an owner that makes every call from one goroutine at a time, as
// limiter replay does with its two private stores. Decide then takes none
// of the store's locks, because their atomic instructions also stall the
// cache misses around them, a visible share of a replayed decision's
// cost. The semantics are NewMemoryStore's (the conformance tests run
// against it); calling it from two goroutines at once is a data race.
func NewSingleGoroutineMemoryStore(opts MemoryOptions) *MemoryStore {
	s := NewMemoryStore(opts)
	s.unshared = true
	return s
}

// LocalClock reports that the store keeps time in process: callers that
// already read the clock may pass it as Request.Now and save a read.
func (s *MemoryStore) LocalClock() bool { return true }

// Len returns the number of buckets held.
func (s *MemoryStore) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.buckets.n
		sh.mu.Unlock()
	}
	return n
}

// Sweep drops buckets that are full again at now (they change no
// decision) and expired multipliers and locks. Call it periodically.
func (s *MemoryStore) Sweep(now time.Time) {
	us := float64(now.UnixMicro())
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.buckets.sweep(us)
		sh.sweepLeases(now)
		sh.mu.Unlock()
	}
	s.mu.Lock()
	s.sweepNext = s.sweepSubjectsLocked(now)
	s.mu.Unlock()
}

// sweepForRoomLocked sweeps the subjects for room in a full table, unless
// no entry left by the last sweep expires before now: a sweep is a scan of
// every multiplier, lock and trust under the store's write lock (7 ms at
// 262,144 locks), and a full table refusing writes must not scan again on
// every refused one, stalling every decision's read lock meanwhile. It
// requires s.mu held for writing.
func (s *MemoryStore) sweepForRoomLocked(now time.Time) {
	if now.Before(s.sweepNext) {
		return
	}
	s.sweepNext = s.sweepSubjectsLocked(now)
}

// noteExpiryLocked lowers sweepNext to t, when a new entry expires at t
// (zero: never); s.mu must be held for writing.
func (s *MemoryStore) noteExpiryLocked(t time.Time) {
	if !t.IsZero() && t.Before(s.sweepNext) {
		s.sweepNext = t
	}
}

// sweepSubjectsLocked drops the expired multipliers, locks and trusts and
// returns when the first entry left expires (far in the future when none
// does); s.mu must be held for writing.
func (s *MemoryStore) sweepSubjectsLocked(now time.Time) time.Time {
	next := neverSwept
	soonest := func(t time.Time) {
		if !t.IsZero() && t.Before(next) {
			next = t
		}
	}
	for k, ms := range s.mults {
		for src, m := range ms {
			if !m.ExpiresAt.IsZero() && !m.ExpiresAt.After(now) {
				delete(ms, src)
				delete(s.setAt, k+"|"+src)
			} else {
				soonest(m.ExpiresAt)
			}
		}
		if len(ms) == 0 {
			delete(s.mults, k)
		}
	}
	for k, l := range s.locks {
		if !l.Until.After(now) {
			delete(s.locks, k)
			delete(s.setAt, k)
		} else {
			soonest(l.Until)
		}
	}
	for k, rules := range s.lockRules {
		sub, id, _ := ParseSubjectKey(k)
		for r := range rules {
			if _, ok := s.locks[RuleLockKey(prefixOf(k), sub, id, r)]; !ok {
				delete(rules, r)
			}
		}
		if len(rules) == 0 {
			delete(s.lockRules, k)
		}
	}
	for k, set := range s.trusts {
		for dev, until := range set {
			if !until.After(now) {
				s.dropTrustLocked(k, set, dev)
			} else {
				soonest(until)
			}
		}
	}
	return next
}

// neverSwept is sweepSubjectsLocked's answer when no entry left expires.
var neverSwept = time.Unix(1<<40, 0)

// Decide implements Decider. It reads req's keys only during the call and
// keeps none of them (a bucket it creates gets a copy of its key), so a
// caller may pass keys that alias a buffer it reuses after the call (the
// engine does). It judges the locks and reads the multipliers first
// (judge), then decides the buckets atomically (decideBuckets).
func (s *MemoryStore) Decide(_ context.Context, req *Request, res *Result) error {
	if err := req.validate(); err != nil {
		return err
	}
	t := req.Now
	if t.IsZero() {
		t = s.now()
	}
	now := float64(t.UnixMicro())
	res.Now = time.UnixMicro(int64(now))
	res.Allowed, res.Locked, res.Lock, res.LockIndex, res.Trusted = false, false, Lock{}, 0, false
	res.Limits = res.Limits[:0]
	res.Subjects = res.Subjects[:0]

	// Scratch space on the stack for the common case of at most 8 limits
	// and subjects; larger requests spill to the heap.
	var multsA, pensA [8]float64
	mults, pens := multsA[:], pensA[:]
	if len(req.Subjects) > len(multsA) {
		mults, pens = make([]float64, len(req.Subjects)), make([]float64, len(req.Subjects))
	}
	if s.judge(req, res, now, mults, pens) {
		return nil // locked
	}
	s.decideBuckets(req, res, now, mults, pens)
	return nil
}

// judge reads, under the store's read lock, whether the device is
// trusted for own buckets, whether a lock is in force (it fills res and
// reports true) and each subject's effective multiplier and penalty end
// into mults and pens.
func (s *MemoryStore) judge(req *Request, res *Result, now float64, mults, pens []float64) bool {
	if len(req.Locks) == 0 && len(req.Subjects) == 0 && req.OwnTrust == "" {
		return false
	}
	if !s.unshared {
		s.mu.RLock()
		defer s.mu.RUnlock()
	}
	res.Trusted = s.ownLocked(req, now)
	for i, k := range req.Locks {
		if l, ok := s.locks[k]; ok && float64(l.Until.UnixMicro()) > now && !s.trustedLocked(l, req, i, now) {
			res.Locked, res.Lock, res.LockIndex = true, l, i
			return true
		}
	}
	empty := len(s.mults) == 0
	for j := range req.Subjects {
		sub := &req.Subjects[j]
		if sub.Cached {
			mults[j], pens[j] = sub.Mult, sub.Pen
			continue
		}
		var stored map[string]Multiplier
		if !empty {
			stored = s.mults[sub.Key]
		}
		mults[j], pens[j] = combineAt(sub.Static, sub.Unverified, stored, now)
	}
	return false
}

// memLookup is where one decision's buckets are: per limit, the bucket
// it takes from, its key's hash, its shard and its slot.
type memLookup struct {
	idx, order [MaxLimits]uint8
	hashes     [MaxLimits]uint64
	keys       [MaxLimits]string
	at         [MaxLimits]int32
}

// decideBuckets evaluates req's limits with the subjects' multipliers and
// takes the tokens when all allow, holding the locks of every shard the
// request touches, in ascending order, so the decision is atomic across
// its buckets and cannot deadlock.
func (s *MemoryStore) decideBuckets(req *Request, res *Result, now float64, mults, pens []float64) {
	var lk memLookup
	nl := len(req.Limits)
	// Each key is hashed once: the low bits pick the shard, the others the
	// slot in the shard's table. An unshared store takes no lock, so it
	// needs no order (the sort's compares of random shards mispredict).
	for i := range req.Limits {
		lk.keys[i] = limitKey(&req.Limits[i], res.Trusted)
		h := memHash(maphash.String(s.seed, lk.keys[i]))
		lk.idx[i], lk.hashes[i] = uint8(h%memShards), h
	}
	if !s.unshared {
		sortShards(&lk.order, &lk.idx, nl)
	}
	s.lockShards(&lk.order, nl, true)
	defer s.lockShards(&lk.order, nl, false)

	cost := math.Floor(req.Cost * unit)
	var evsA [8]eval
	evs := evsA[:]
	if nl > len(evsA) {
		evs = make([]eval, nl)
	}
	s.find(req, &lk, evs)
	allowed := true
	for i := range req.Limits {
		l := &req.Limits[i]
		m, pend, unknown := limitMultiplier(l.Subjects, mults, pens, len(req.Subjects))
		evs[i].kind = l.Kind
		switch l.Kind {
		case KindQuota:
			evaluateQuota(&evs[i], now, l, m, pend, unknown, cost)
		case KindConcurrency:
			evaluateConcurrency(&evs[i], s.shards[lk.idx[i]].leases[lk.keys[i]], now, l, m, pend, unknown, cost)
		default:
			evaluate(&evs[i], now, l, m, pend, unknown, cost)
		}
		if !evs[i].ok && !l.Shadow {
			allowed = false
		}
	}
	if allowed && cost > 0 {
		allowed = s.roomForLeases(req, &lk, evs, now)
	}
	res.Allowed = allowed
	for j := range req.Subjects {
		if req.Subjects[j].Cached {
			res.Subjects = append(res.Subjects, SubjectResult{})
		} else {
			res.Subjects = append(res.Subjects, SubjectResult{Read: true, Mult: mults[j], Pen: pens[j]})
		}
	}
	if allowed && cost > 0 {
		// Buckets that exist are updated in place (the pointers were read
		// under the locks still held) before any new bucket is inserted,
		// since an insertion may evict, grow the table or move slots.
		for pass := 0; pass < 2; pass++ {
			for i := range req.Limits {
				ev := &evs[i]
				if ev.ok && (ev.b != nil) == (pass == 0) {
					s.take(&s.shards[lk.idx[i]], lk.hashes[i], lk.keys[i], ev, req.Lease, cost, now)
				}
			}
		}
	}
	for i := range req.Limits {
		res.Limits = append(res.Limits, LimitResult{})
		evs[i].resultTo(&res.Limits[len(res.Limits)-1], now, &req.Limits[i])
	}
}

// roomForLeases denies, in evs, each concurrency limit that would add a
// lease to a shard holding its bound (MaxLeases) after its expired leases
// are swept, and reports whether the decision is still allowed; the
// shards' locks must be held.
func (s *MemoryStore) roomForLeases(req *Request, lk *memLookup, evs []eval, now float64) bool {
	allowed := true
	for i := range req.Limits {
		l := &req.Limits[i]
		if l.Kind != KindConcurrency || !evs[i].ok {
			continue
		}
		sh := &s.shards[lk.idx[i]]
		if sh.nleases < s.maxLeases {
			continue
		}
		if _, held := sh.leases[lk.keys[i]][req.Lease]; held {
			continue // renewed, not added
		}
		if now >= sh.leaseNext {
			sh.leaseNext = sh.sweepLeasesAt(now)
			if sh.nleases < s.maxLeases {
				continue
			}
		}
		s.refused.Add(1)
		evs[i].ok, evs[i].retry = false, math.Max(sh.leaseNext-now, 1)
		if !l.Shadow {
			allowed = false
		}
	}
	return allowed
}

// Evicted returns how many buckets were evicted for room (MaxKeys) before
// they were full again: their keys' next requests found full buckets, so
// each is a key that got back tokens it had spent. Evicting a bucket
// already full changes no decision and is not counted.
func (s *MemoryStore) Evicted() uint64 {
	var n uint64
	for i := range s.shards {
		sh := &s.shards[i]
		if !s.unshared {
			sh.mu.Lock()
		}
		n += sh.buckets.evictedLive
		if !s.unshared {
			sh.mu.Unlock()
		}
	}
	return n
}

// Leases returns the concurrency leases held (expired ones included until
// swept).
func (s *MemoryStore) Leases() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		if !s.unshared {
			sh.mu.Lock()
		}
		n += sh.nleases
		if !s.unshared {
			sh.mu.Unlock()
		}
	}
	return n
}

// LeasesRefused returns how many concurrency limits were denied because
// their shard held MaxLeases leases (see MemoryOptions.MaxLeases).
func (s *MemoryStore) LeasesRefused() uint64 { return s.refused.Load() }

// find finds every bucket of lk before evaluating any, in three passes
// over the look-ups, which do not depend on each other: their slots, then
// the first and last bytes of their keys in the arenas, then the keys in
// full. A look-up's arena read depends on its slot, so a single pass
// would wait for two cache misses per key in turn; three passes wait for
// about two per decision (each pass's misses overlap).
func (s *MemoryStore) find(req *Request, lk *memLookup, evs []eval) {
	for i := range req.Limits {
		lk.at[i] = int32(s.shards[lk.idx[i]].buckets.probe(lk.hashes[i]))
	}
	var touched uint8
	for i := range req.Limits {
		touched += s.shards[lk.idx[i]].buckets.touch(int(lk.at[i]))
	}
	evs[0].touched = touched // kept, so that the compiler keeps the reads
	for i := range req.Limits {
		evs[i].b = s.shards[lk.idx[i]].buckets.match(int(lk.at[i]), lk.hashes[i], lk.keys[i])
	}
}

// sortShards sets order[:n] to idx[:n] sorted.
func sortShards(order, idx *[MaxLimits]uint8, n int) {
	for i := 0; i < n; i++ {
		sh := idx[i]
		j := i
		for ; j > 0 && order[j-1] > sh; j-- {
			order[j] = order[j-1]
		}
		order[j] = sh
	}
}

// lockShards locks (or unlocks) each distinct shard of the sorted order[:n],
// unless the store is unshared.
func (s *MemoryStore) lockShards(order *[MaxLimits]uint8, n int, lock bool) {
	if s.unshared {
		return
	}
	for i := 0; i < n; i++ {
		if i > 0 && order[i] == order[i-1] {
			continue
		}
		if lock {
			s.shards[order[i]].mu.Lock()
		} else {
			s.shards[order[i]].mu.Unlock()
		}
	}
}

// take takes cost from ev's limit (key, hashed h) and writes its state;
// sh.mu must be held.
func (s *MemoryStore) take(sh *memShard, h uint64, key string, ev *eval, lease string, cost, now float64) {
	switch ev.kind {
	case KindConcurrency:
		set := sh.leases[key]
		if set == nil {
			if sh.leases == nil {
				sh.leases = make(map[string]leaseSet)
			}
			set = leaseSet{}
			// the set outlives Decide: keep a key of its own, not the
			// request's (the engine may lend its reused key buffer)
			sh.leases[strings.Clone(key)] = set
		}
		sh.nleases += takeConcurrency(ev, set, lease, now)
		sh.leaseNext = math.Min(sh.leaseNext, ev.end)
		return
	case KindQuota:
		// a quota's state is its count and period start, kept until the
		// period's end (sweep drops it then)
		ev.tokens -= cost
		s.put(sh, h, key, memBucket{tokens: ev.used + cost, last: ev.last, full: ev.end}, ev.b, now)
		return
	}
	ev.tokens -= cost
	s.store(sh, h, key, ev, now)
}

// put writes state for key (hashed h) into b when it exists, else a new
// slot; sh.mu must be held.
func (s *MemoryStore) put(sh *memShard, h uint64, key string, state memBucket, b *memBucket, now float64) {
	if b != nil {
		*b = state
		return
	}
	if sh.buckets.n >= s.maxPerShard {
		sh.buckets.evict(now)
	}
	sh.buckets.put(h, key, state)
}

// store writes ev's state for key (hashed h); sh.mu must be held.
func (s *MemoryStore) store(sh *memShard, h uint64, key string, ev *eval, now float64) {
	full := resetAt(now, ev.tokens, ev.effb, ev.per)
	if b := ev.b; b != nil {
		b.tokens, b.last, b.full = ev.tokens, ev.last, full
		return
	}
	if sh.buckets.n >= s.maxPerShard {
		sh.buckets.evict(now)
	}
	sh.buckets.put(h, key, memBucket{tokens: ev.tokens, last: ev.last, full: full})
}

// unit is the number of micro-tokens in a token: buckets count whole
// micro-tokens, so both stores hold exact integers in float64.
const unit = 1e6

// eval is one limit's evaluation, in micro-tokens and microseconds.
type eval struct {
	tokens, last, effb, per, retry float64
	// used, reset and end are a quota's count, next period's start (twice)
	// or a concurrency limit's live leases, reset and new lease's expiry
	used, reset, end float64
	kind             Kind
	ok               bool
	touched          uint8      // see Decide: read, never used
	b                *memBucket // the stored state read, nil when absent
}

// resultTo writes ev's LimitResult to lr.
func (ev *eval) resultTo(lr *LimitResult, now float64, l *Limit) {
	reset := ev.reset
	if ev.kind == KindBucket {
		reset = resetAt(now, ev.tokens, ev.effb, ev.per)
	}
	limitResultTo(lr, ev.ok, ev.tokens, ev.effb, reset, ev.retry, l)
}

// resetAt is when a bucket holding tokens is full again (decide.lua's reset).
func resetAt(now, tokens, effb, per float64) float64 {
	if effb > tokens && per > 0 {
		return now + math.Ceil((effb-tokens)/per)
	}
	return now
}

// limitResultTo converts a limit's integer outcome to a LimitResult in lr,
// field by field (assigning a whole struct that holds a pointer goes
// through a copy on the stack); both stores build their results here.
func limitResultTo(lr *LimitResult, ok bool, tokens, effb, reset, retry float64, l *Limit) {
	lr.Allowed = ok
	lr.Remaining = tokens / unit
	lr.Burst = effb / unit
	lr.Multiplier = effb / (l.Burst * unit)
	lr.Reset = time.UnixMicro(int64(reset))
	lr.RetryAfter = time.Duration(retry) * time.Microsecond
}

// evaluate is decide.lua's per-limit arithmetic, operation for operation,
// into ev (in place: a returned struct would be copied through the stack).
// ev.b is the stored state (nil when absent); now is in microseconds, cost
// in micro-tokens.
func evaluate(ev *eval, now float64, l *Limit, m, pend float64, unknown bool, cost float64) {
	b := ev.b
	effb, per := scaled(l, m)
	tokens := effb
	last := now
	if b != nil {
		el := 0.0
		if b.last > now {
			last = b.last
		} else {
			el = now - b.last
		}
		tokens = b.tokens + math.Floor(el*per)
		if tokens > effb {
			tokens = effb
		}
	}
	ok := tokens >= cost
	retry := 0.0
	if !ok {
		retry = bucketRetry(tokens, cost, effb, per, pend, unknown, now)
	}
	ev.tokens, ev.last, ev.effb, ev.per, ev.retry, ev.ok = tokens, last, effb, per, retry, ok
}

// scaled returns limit l's effective burst in micro-tokens and its refill
// in micro-tokens per µs under multiplier m.
func scaled(l *Limit, m float64) (effb, per float64) {
	return math.Floor(l.Burst * m * unit), l.Rate * m * unit / float64(l.Period.Microseconds())
}

// bucketRetry is how long (µs) a bucket holding tokens that refused cost
// makes the caller wait: until it holds cost, or, when cost is beyond its
// burst (a multiplier shrank it), until the penalties end (pend, when
// known) or an hour. The wait is one the refill (floor(el * per), in
// evaluate and decide.lua) fills: ceil(need / per) rounds apart from it
// and may be a micro-token short, so it is lengthened, in steps doubling,
// until floor(wait * per) holds need.
func bucketRetry(tokens, cost, effb, per, pend float64, unknown bool, now float64) float64 {
	if cost <= effb {
		need := cost - tokens
		wait := math.Ceil(need / per)
		for step := 1.0; math.Floor(wait*per) < need; step *= 2 {
			wait += step
		}
		return wait
	}
	if pend > now && !unknown {
		return pend - now
	}
	return 3600000000
}

// limitMultiplier multiplies the subjects' multipliers in index order and
// finds when their penalties end, as decide.lua does.
func limitMultiplier(mask uint32, mults, pens []float64, ns int) (m, pend float64, unknown bool) {
	m = 1
	for j := 0; j < ns; j++ {
		if mask&(1<<uint(j)) == 0 {
			continue
		}
		m = m * mults[j]
		if mults[j] < 1 {
			if pens[j] == 0 {
				unknown = true
			} else if pens[j] > pend {
				pend = pens[j]
			}
		}
	}
	return m, pend, unknown
}

// combineAt is decide.lua's per-subject rule: the effective multiplier of
// static, unverified and the unexpired stored ones ("attestation" entries
// left by the first edition are ignored: attestation is proven per request
// and comes in static and unverified), and when the lowest penalty ends (0
// when unknown or when nothing is below 1).
func combineAt(static, unverified float64, stored map[string]Multiplier, now float64) (mult, pen float64) {
	if len(stored) == 0 {
		m := static
		if unverified < 1 {
			m = math.Min(m, unverified)
		} else if m >= 1 {
			m = math.Max(m, unverified)
		}
		return m, 0
	}
	lo, hi := static, static
	for src, m := range stored {
		e := expUS(m.ExpiresAt)
		if m.Value >= 0 && (e == 0 || e > now) && src != "attestation" {
			lo = math.Min(lo, m.Value)
			hi = math.Max(hi, m.Value)
		}
	}
	floor := static
	lo = math.Min(lo, unverified)
	hi = math.Max(hi, unverified)
	floor = math.Min(floor, unverified)
	if lo >= 1 {
		return hi, 0
	}
	if floor > lo {
		for src, m := range stored {
			e := expUS(m.ExpiresAt)
			if m.Value != lo || !(e == 0 || e > now) || src == "attestation" {
				continue
			}
			if e == 0 {
				pen = -1
			} else if pen >= 0 && e > pen {
				pen = e
			}
		}
	}
	if pen < 0 {
		pen = 0
	}
	return lo, pen
}

// expUS returns t in Unix microseconds, 0 for the zero time (never).
func expUS(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixMicro())
}

// truncUS truncates t to whole microseconds, the resolution both stores keep.
func truncUS(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return time.UnixMicro(t.UnixMicro())
}

var _ Store = (*MemoryStore)(nil)
