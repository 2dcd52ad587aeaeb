package bucket

import (
	"context"
	"math"
	"strings"
	"sync"
	"time"
)

// Local shares of hot limits.
//
// A limit whose key all traffic shares (`by: [global]`, a route, a
// celebrity user) would cap a deployment at one Redis shard's rate for one
// key, and costs every decision a key in that shard. A limit marked
// Limit.Share is served instead from a share: tokens this process took
// from the store ahead of use, up to twice what this process asked of the
// key in the last Share (at most Share's worth at the limit's effective
// rate), held for Share from their last refill. A decision whose shared
// limits all hold enough tokens takes them locally and sends the store
// only its other limits and locks (none at all when there are none).
//
// The bound: the tokens of a share are taken from the store before they
// are handed out, so a shared limit never admits more than its bucket
// does. It may refuse early: a share is at most L = rate × multiplier ×
// Share tokens (a quarter of the effective burst at most) and a process
// holds at most 1.5 L per key (a refill takes a share when one is below
// half of it, and tops it up to a share once it has lived half of Share),
// so the store may refuse up to 1.5 N L tokens that N processes hold and
// have not used; a share that lapses unused loses its remainder. Sizing a
// share by what the process asks, rather than by the limit's rate, keeps
// what N processes take near what they use (N shares of L each per Share
// would be N times the rate), and refilling at half its life replaces a
// share before it lapses. A multiplier or a lock written on the limit's
// subjects applies to its shares from their next refill: within Share.
// Denials always come from the store: a decision whose share is short
// takes from the bucket as any other limit does, exactly, and a
// decision that another limit refuses gives its shared tokens back
// (all-or-nothing holds).
//
// A key gets a share once it is hot: a second decision on it within Share
// of the first. Refills run in the background, one per key at a time,
// so a hot key's decisions do not wait for them.

// ShareOptions configures Shares.
type ShareOptions struct {
	// Now is the clock of decisions whose Request.Now is zero (default
	// time.Now).
	Now func() time.Time
	// MaxKeys bounds the keys with a share (default 4096); a key beyond
	// it is decided by the store, exactly.
	MaxKeys int
	// Timeout bounds one refill (default 1s; the store's own timeout
	// usually ends it first).
	Timeout time.Duration
}

// Shares is a Decider in front of another that serves the limits marked
// Limit.Share from local shares (see above). It is safe for concurrent
// use.
type Shares struct {
	next    Decider
	now     func() time.Time
	max     int
	timeout time.Duration
	mu      sync.Mutex
	keys    map[string]*share
	swept   time.Time      // the last sweep of a full table (track)
	wg      sync.WaitGroup // refills in flight
	pool    sync.Pool      // *shareScratch
}

// share is one key's local share.
type share struct {
	tokens    float64   // held and not handed out
	until     time.Time // when the held tokens lapse
	gen       uint64    // lapses so far: a refund goes only to the share it came from
	seen      time.Time // the last decision on the key
	asked     float64   // tokens the key's decisions asked for since from
	from      time.Time // since when asked counts (the last refill's start)
	refilling bool
	dry       time.Time // no refill before (the store refused the last one)
	// What the last refill's store answer said, for the results of the
	// decisions the share serves.
	remaining, burst, mult float64
	rate                   float64 // effective tokens per second
}

// shareScratch is one decision's space for the request sent on.
type shareScratch struct {
	req    Request
	res    Result
	limits []Limit // req's limits
	local  [MaxLimits]localTake
	refill []refillJob
}

// localTake is one shared limit served locally: its share and what it took.
type localTake struct {
	sh  *share
	gen uint64
}

// refillJob is a refill to start once the decision is done.
type refillJob struct {
	sh   *share
	n    float64          // the tokens it takes
	lim  Limit            // sent as is: its Share cleared
	dur  time.Duration    // its Share
	subs []RequestSubject // the subjects lim names, its Subjects renumbered
	now  time.Time
}

// NewShares returns Shares in front of next.
func NewShares(next Decider, o ShareOptions) *Shares {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = 4096
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	s := &Shares{next: next, now: o.Now, max: o.MaxKeys, timeout: o.Timeout, keys: map[string]*share{}}
	s.pool.New = func() any { return new(shareScratch) }
	return s
}

// Wait blocks until the refills in flight are done (tests, shutdown).
func (s *Shares) Wait() { s.wg.Wait() }

// Decide implements Decider.
func (s *Shares) Decide(ctx context.Context, req *Request, res *Result) error {
	if !anyShared(req) {
		return s.next.Decide(ctx, req, res)
	}
	now := req.Now
	if now.IsZero() {
		now = s.now()
	}
	sc := s.pool.Get().(*shareScratch)
	defer s.pool.Put(sc)
	sc.refill = sc.refill[:0]
	nlocal := s.takeLocal(req, sc, now)
	var err error
	if nlocal == 0 {
		err = s.next.Decide(ctx, req, res)
	} else {
		err = s.decideRest(ctx, req, res, sc, now)
	}
	s.startRefills(sc.refill, req)
	return err
}

func anyShared(req *Request) bool {
	for i := range req.Limits {
		if req.Limits[i].Share > 0 {
			return true
		}
	}
	return false
}

// takeLocal takes req.Cost from the share of every shared limit of req
// that holds enough, recording them in sc.local (nil share: from the
// store), and queues the refills that are due; it returns how many it
// took. A decision of cost 0 takes nothing and is served locally.
func (s *Shares) takeLocal(req *Request, sc *shareScratch, now time.Time) int {
	n := 0
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range req.Limits {
		sc.local[i] = localTake{}
		l := &req.Limits[i]
		if l.Share <= 0 {
			continue
		}
		sh := s.keys[l.Key]
		if sh == nil {
			s.track(l.Key, now)
			continue
		}
		hot := now.Sub(sh.seen) <= l.Share
		sh.seen = now
		if hot {
			sh.asked += req.Cost
		} else { // what it asks is measured afresh from here, as track does
			sh.asked, sh.from = 0, now
		}
		if now.Before(sh.until) && sh.tokens >= req.Cost {
			sh.tokens -= req.Cost
			sc.local[i] = localTake{sh: sh, gen: sh.gen}
			n++
		} else if !now.Before(sh.until) && sh.tokens > 0 {
			sh.tokens = 0 // lapsed
			sh.gen++
		}
		if !hot || sh.refilling || now.Before(sh.dry) {
			continue
		}
		// below half a share a refill takes a whole one; a share past half
		// its life is topped up to its size (what it holds lives on with it)
		size := s.size(l.Rate/l.Period.Seconds(), l.Burst, l.Share, sh, now)
		take := size
		if sh.tokens >= size/2 {
			take = math.Floor(size - sh.tokens)
			if take < 1 || now.Before(sh.until.Add(-l.Share/2)) {
				continue
			}
		}
		sh.refilling = true
		sh.asked, sh.from = 0, now
		sc.refill = append(sc.refill, refillJob{sh: sh, n: take, lim: *l, now: req.Now})
	}
	return n
}

// track starts watching key for heat, within the bound on keys (expired
// shares make room first).
func (s *Shares) track(key string, now time.Time) {
	if len(s.keys) >= s.max {
		// a full table is swept at most once a second: keys rotated by a
		// flood must not cost every decision a walk of the table
		if now.Sub(s.swept) < time.Second && !now.Before(s.swept) {
			return
		}
		s.swept = now
		for k, sh := range s.keys {
			if !sh.refilling && now.Sub(sh.seen) > time.Minute {
				delete(s.keys, k)
			}
		}
		if len(s.keys) >= s.max {
			return
		}
	}
	s.keys[strings.Clone(key)] = &share{seen: now, from: now}
}

// size is the tokens a refill of sh's share takes at now: twice what the
// key's decisions asked for in the last share's time (the rate they asked
// at since the last refill began, over share), so that a share outlasts
// the refill that replaces it; at most share's worth at the effective rate
// the last refill saw (rate and burst, the limit's own, before the first)
// and a quarter of the effective burst; at least one token.
func (s *Shares) size(rate, burst float64, share time.Duration, sh *share, now time.Time) float64 {
	if sh.rate != 0 {
		rate, burst = sh.rate, sh.burst
	}
	n := math.Floor(math.Min(rate*share.Seconds(), burst/4))
	if since := now.Sub(sh.from); since > 0 {
		n = math.Min(n, math.Ceil(2*sh.asked*share.Seconds()/since.Seconds()))
	}
	return math.Max(n, 1)
}

// decideRest sends the store req without the limits served locally,
// then lays its answer out as the answer to req. A decision the store
// refuses (or that fails) gives the local tokens back.
func (s *Shares) decideRest(ctx context.Context, req *Request, res *Result, sc *shareScratch, now time.Time) error {
	sub := &sc.req
	*sub = *req
	sub.Limits = sc.limits[:0]
	for i := range req.Limits {
		if sc.local[i].sh == nil {
			sub.Limits = append(sub.Limits, req.Limits[i])
		}
	}
	sc.limits = sub.Limits
	subres := &sc.res
	var err error
	if len(sub.Limits) == 0 && len(sub.Locks) == 0 {
		subres.Allowed, subres.Locked, subres.Now = true, false, now
		subres.Limits, subres.Subjects = subres.Limits[:0], subres.Subjects[:0]
		for range req.Subjects {
			subres.Subjects = append(subres.Subjects, SubjectResult{})
		}
	} else if err = s.next.Decide(ctx, sub, subres); err != nil {
		s.refund(req, sc)
		return err
	}
	s.merge(req, res, sc)
	if !res.Allowed {
		s.refund(req, sc)
	}
	return nil
}

// merge fills res from the store's answer sc.res and the local takes.
func (s *Shares) merge(req *Request, res *Result, sc *shareScratch) {
	sr := &sc.res
	res.Allowed, res.Locked, res.Lock, res.LockIndex, res.Now, res.Trusted = sr.Allowed, sr.Locked, sr.Lock, sr.LockIndex, sr.Now, sr.Trusted
	res.Subjects = append(res.Subjects[:0], sr.Subjects...)
	res.Limits = res.Limits[:0]
	if sr.Locked {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j := 0
	for i := range req.Limits {
		t := sc.local[i]
		if t.sh == nil {
			res.Limits = append(res.Limits, sr.Limits[j])
			j++
			continue
		}
		sh := t.sh
		left := math.Min(sh.remaining+sh.tokens, sh.burst)
		lr := LimitResult{Allowed: true, Remaining: left, Burst: sh.burst, Multiplier: sh.mult, Reset: sr.Now}
		if sh.rate > 0 && left < sh.burst {
			lr.Reset = sr.Now.Add(time.Duration((sh.burst - left) / sh.rate * float64(time.Second)))
		}
		res.Limits = append(res.Limits, lr)
	}
}

// refund gives the local takes of a decision that took nothing back to
// their shares, unless a share lapsed or was refilled since.
func (s *Shares) refund(req *Request, sc *shareScratch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range req.Limits {
		if t := sc.local[i]; t.sh != nil && t.sh.gen == t.gen {
			t.sh.tokens += req.Cost
		}
	}
}

// startRefills runs each queued refill in the background, on copies of
// what it needs of req (the caller reuses req once Decide returns).
func (s *Shares) startRefills(jobs []refillJob, req *Request) {
	for _, j := range jobs {
		j.dur = j.lim.Share
		j.lim.Key, j.lim.Share, j.lim.OwnKey = strings.Clone(j.lim.Key), 0, ""
		mask := j.lim.Subjects
		j.lim.Subjects = 0
		for k := range req.Subjects {
			if mask&(1<<uint(k)) != 0 {
				sub := req.Subjects[k]
				sub.Key, sub.Cached = strings.Clone(sub.Key), false
				j.lim.Subjects |= 1 << uint(len(j.subs))
				j.subs = append(j.subs, sub)
			}
		}
		s.wg.Add(1)
		go s.refill(j)
	}
}

// refill takes a share's worth of tokens from the store for j's key and
// hands them to its share, which holds them for Share from the store's
// time. A refused refill leaves the key to the store for Share.
func (s *Shares) refill(j refillJob) {
	defer s.wg.Done()
	share, n := j.dur, j.n
	req := Request{Now: j.now, Cost: n, Limits: []Limit{j.lim}, Subjects: j.subs}
	var res Result
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	err := s.next.Decide(ctx, &req, &res)
	cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := j.sh
	sh.refilling = false
	at := j.now // the share's times are this process's clock's
	if at.IsZero() {
		at = s.now()
	}
	// Only tokens the bucket gave count: the limit's own answer, not the
	// decision's, which a shadow limit never refuses.
	if err != nil || !res.Allowed || len(res.Limits) != 1 || !res.Limits[0].Allowed {
		sh.dry = at.Add(share)
		return
	}
	lr := res.Limits[0]
	if !at.Before(sh.until) {
		sh.tokens = 0
		sh.gen++
	}
	sh.tokens += n
	sh.until = at.Add(share)
	sh.remaining, sh.burst, sh.mult = lr.Remaining, lr.Burst, lr.Multiplier
	sh.rate = j.lim.Rate * lr.Multiplier / j.lim.Period.Seconds()
}
