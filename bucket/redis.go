package bucket

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client is what RedisStore needs of a go-redis client. *redis.Client,
// *redis.ClusterClient and *redis.Ring (any redis.UniversalClient) fit.
type Client interface {
	redis.Scripter
	Do(ctx context.Context, args ...interface{}) *redis.Cmd
	Pipeline() redis.Pipeliner
	HDel(ctx context.Context, key string, fields ...string) *redis.IntCmd
	Del(ctx context.Context, keys ...string) *redis.IntCmd
	Get(ctx context.Context, key string) *redis.StringCmd
	SetArgs(ctx context.Context, key string, value interface{}, a redis.SetArgs) *redis.StatusCmd
}

// RedisOptions configures a RedisStore.
type RedisOptions struct {
	// Timeout bounds each decision, from the call of Decide (default
	// 50ms): the wait for a lane, the round trip and, on a Cluster, every
	// step. A decision that runs over fails with ErrUnavailable. For the
	// bound to hold whatever Redis does, the client must respect context
	// deadlines (go-redis ContextTimeoutEnabled).
	Timeout time.Duration
	// Lanes is the number of round trips in flight at once (default 2).
	Lanes int
	// MaxBatch is the most decisions sent in one round trip (default 128).
	MaxBatch int
	// ExpirySlack is how long a bucket key outlives the moment it would be
	// full again (default 1s). Tests that inject time set it higher.
	ExpirySlack time.Duration
	// Cluster is set for Redis Cluster: a decision whose keys span several
	// hash slots is evaluated per slot (see decideCluster).
	Cluster bool
	// Prefix starts every key the store builds (default DefaultPrefix):
	// the subject-level operations' keys and listing indexes. Decisions
	// carry their keys, built by the caller under the same prefix.
	Prefix string
}

// RedisStore is the Redis-backed Store. Decisions are evaluated by
// decide.lua; decisions made concurrently are batched by a few lanes, each
// batch one round trip of EVALSHAs carrying up to maxPerScript decisions
// each (one each on Redis Cluster), so many callers share few round trips.
// It is safe for concurrent use; Close stops its lanes.
type RedisStore struct {
	c       Client
	prefix  string
	timeout time.Duration
	max     int
	slack   float64 // ExpirySlack in ms
	cluster bool
	// refreshed is when refreshOnFailure last asked the Cluster client to
	// reload its slot map (unix ns).
	refreshed atomic.Int64
	queue     chan *call
	stop      chan struct{}
	wg        sync.WaitGroup
	once      sync.Once
	// calls recycles this store's calls with their timers. It is the
	// store's own, not the process's: a timer belongs to the goroutines
	// that made it (a testing/synctest bubble's stays in its bubble), so a
	// call must not pass from one store's callers to another's.
	calls sync.Pool
}

// call is one decision waiting for its lane.
type call struct {
	keys     []string
	nums     []byte      // the decision's numbers, packed (see build)
	blob     interface{} // nums, boxed once for the command
	device   string
	reply    interface{}
	err      error
	done     chan struct{}
	deadline time.Time   // when the caller stops waiting
	timer    *time.Timer // fires at deadline; reused with the call
	// gone is the caller's ctx.Done(): once it is closed nobody waits for
	// the answer, and a lane drops the call unsent (see run).
	gone <-chan struct{}
	// state is callQueued until a lane sends the call (callSent) or its
	// caller stops waiting for it first (callDropped): whichever moves it
	// first decides whether the call can have reached Redis.
	state atomic.Int32
}

// States of a call.
const (
	callQueued int32 = iota
	callSent
	callDropped
)

// givenUp returns the error of a call whose caller stops waiting with
// cause: ErrUnanswered too when a lane had sent it already.
func (c *call) givenUp(cause error) error {
	if c.state.CompareAndSwap(callQueued, callDropped) {
		return cause // never sent: no lane will
	}
	return fmt.Errorf("%w: %w", ErrUnanswered, cause)
}

// newCall makes a call for the store's pool.
func newCall() any {
	return &call{keys: make([]string, 0, 16), nums: make([]byte, 0, 512), done: make(chan struct{}, 1)}
}

// NewRedisStore returns a RedisStore over c and starts its lanes.
func NewRedisStore(c Client, opts RedisOptions) *RedisStore {
	if opts.Timeout <= 0 {
		opts.Timeout = 50 * time.Millisecond
	}
	if opts.Lanes <= 0 {
		opts.Lanes = 2
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 128
	}
	if opts.ExpirySlack <= 0 {
		opts.ExpirySlack = time.Second
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	s := &RedisStore{
		c:       c,
		prefix:  opts.Prefix,
		slack:   float64(opts.ExpirySlack.Milliseconds()),
		cluster: opts.Cluster,
		timeout: opts.Timeout,
		max:     opts.MaxBatch,
		queue:   make(chan *call, opts.Lanes*opts.MaxBatch),
		stop:    make(chan struct{}),
		calls:   sync.Pool{New: newCall},
	}
	for i := 0; i < opts.Lanes; i++ {
		s.wg.Add(1)
		go s.lane()
	}
	return s
}

// Close stops the lanes; decisions after Close fail with ErrUnavailable.
func (s *RedisStore) Close() error {
	s.once.Do(func() { close(s.stop) })
	s.wg.Wait()
	return nil
}

// errClosed is returned by decisions on a closed store.
var errClosed = errors.New("bucket: store closed")

// Decide implements Decider.
func (s *RedisStore) Decide(ctx context.Context, req *Request, res *Result) error {
	if err := req.validate(); err != nil {
		return err
	}
	if s.cluster && !sameSlot(req) {
		return s.refreshOnFailure(s.decideCluster(ctx, req, res))
	}
	return s.refreshOnFailure(s.decideOne(ctx, req, res))
}

// errDeadline is the error of a decision not answered within Timeout.
var errDeadline = fmt.Errorf("%w: no answer within the store timeout: %w", ErrUnavailable, context.DeadlineExceeded)

// decideOne evaluates req with one EVALSHA (every key in one slot, or a
// standalone Redis), within Timeout of the call (ctx's deadline, when
// sooner): the wait for a lane counts. A caller that has gone (ctx done)
// is not queued, and one that goes while queued is dropped by its lane:
// an abandoned decision costs Redis nothing, so a flood of them (HTTP/2
// rapid reset) holds up no one else's decision past its deadline.
func (s *RedisStore) decideOne(ctx context.Context, req *Request, res *Result) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	c := s.calls.Get().(*call)
	c.build(req, s.slack)
	c.state.Store(callQueued)
	c.gone = ctx.Done()
	c.deadline = time.Now().Add(s.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(c.deadline) {
		c.deadline = d
	}
	if c.timer == nil {
		c.timer = time.NewTimer(time.Until(c.deadline))
	} else {
		c.timer.Reset(time.Until(c.deadline))
	}
	if err := s.enqueue(ctx, c); err != nil {
		return err
	}
	select {
	case <-c.done:
		c.timer.Stop()
	case <-c.timer.C:
		// The lane still owns c; leave it to the garbage collector.
		return c.givenUp(errDeadline)
	case <-ctx.Done():
		return c.givenUp(fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err()))
	}
	reply, err := c.reply, c.err
	c.reply, c.err = nil, nil
	s.calls.Put(c)
	if err != nil {
		// sent: a lost connection or a timeout may have lost the answer
		// of a script that ran (a Redis error reply means it did not, but
		// telling them apart is not worth a slot held for its lease_ttl)
		return fmt.Errorf("%w: %w: decide: %w", ErrUnavailable, ErrUnanswered, err)
	}
	if err := parseDecision(reply, req, res); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// enqueue hands c to a lane. The common case, room in the queue, costs
// one non-blocking send (no lock on the other channels, no timer in the
// heap); otherwise it waits for room within c's deadline. On an error c
// is back in the pool.
func (s *RedisStore) enqueue(ctx context.Context, c *call) error {
	select {
	case <-s.stop:
		c.timer.Stop()
		s.calls.Put(c)
		return fmt.Errorf("%w: %w", ErrUnavailable, errClosed)
	default:
	}
	select {
	case s.queue <- c:
		return nil
	default:
	}
	select {
	case s.queue <- c:
		return nil
	case <-c.timer.C:
		s.calls.Put(c) // no lane has seen it
		return errDeadline
	case <-ctx.Done():
		c.timer.Stop()
		s.calls.Put(c)
		return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	case <-s.stop:
		c.timer.Stop()
		s.calls.Put(c)
		return fmt.Errorf("%w: %w", ErrUnavailable, errClosed)
	}
}

// build fills c's keys and arguments for req (see decide.lua for the
// layout): its keys, its numbers as one string of little-endian float64s
// and its device.
func (c *call) build(req *Request, slack float64) {
	own := ownLimits(req)
	c.keys = appendKeys(c.keys[:0], req, own)
	now := 0.0
	if !req.Now.IsZero() {
		now = float64(req.Now.UnixMicro())
	}
	// The numbers go as one string of little-endian float64s: the script
	// reads them with one struct.unpack, and the values are exact (what
	// tonumber of the shortest decimal form would give).
	b := appendF64(c.nums[:0], float64(len(c.keys)), now, float64(len(req.Limits)), float64(len(req.Subjects)),
		float64(len(req.Locks)), req.Cost, slack)
	for i := range req.Locks {
		if i < len(req.TrustKeys) && req.TrustKeys[i] != "" {
			b = appendF64(b, 1)
		} else {
			b = appendF64(b, 0)
		}
	}
	for i := range req.Subjects {
		sub := &req.Subjects[i]
		if sub.Cached {
			b = appendF64(b, sub.Static, sub.Unverified, 1, sub.Mult, sub.Pen)
		} else {
			b = appendF64(b, sub.Static, sub.Unverified, 0, 0, 0)
		}
	}
	for i := range req.Limits {
		b = appendLimit(b, &req.Limits[i], len(req.Subjects))
	}
	if req.hasConcurrency() {
		hi, lo := 0.0, 0.0
		if validLease(req.Lease) {
			hi, lo = leaseNumbers(req.Lease)
		}
		b = appendF64(b, hi, lo)
	}
	if own > 0 {
		for i := range req.Limits {
			if req.Limits[i].OwnKey != "" {
				b = appendF64(b, float64(i+1))
			}
		}
	}
	b = appendF64(b, float64(own))
	c.nums = b
	c.blob, c.device = b, req.Device
}

// appendKeys appends req's keys in decide.lua's order: the buckets, the
// multiplier hashes of the subjects not cached, the locks, the trust sets
// of the locks that have one and, when own > 0, the own buckets and their
// trust set.
func appendKeys(keys []string, req *Request, own int) []string {
	for i := range req.Limits {
		keys = append(keys, req.Limits[i].Key)
	}
	for i := range req.Subjects {
		if !req.Subjects[i].Cached {
			keys = append(keys, req.Subjects[i].Key)
		}
	}
	keys = append(keys, req.Locks...)
	for _, k := range req.TrustKeys {
		if k != "" {
			keys = append(keys, k)
		}
	}
	if own > 0 {
		for i := range req.Limits {
			if req.Limits[i].OwnKey != "" {
				keys = append(keys, req.Limits[i].OwnKey)
			}
		}
		keys = append(keys, req.OwnTrust)
	}
	return keys
}

// appendLimit appends one limit's numbers (burst, rate, period_us, flags,
// nsub, then its subjects' 1-based indexes among nsub subjects): a
// quota's rate is its calendar period, a concurrency limit's period its
// lease TTL.
func appendLimit(b []byte, l *Limit, nsub int) []byte {
	shadow := 0.0
	if l.Shadow {
		shadow = 1
	}
	n := 0
	for j := 0; j < nsub; j++ {
		if l.Subjects&(1<<uint(j)) != 0 {
			n++
		}
	}
	rate, period := l.Rate, float64(l.Period.Microseconds())
	switch l.Kind {
	case KindQuota:
		rate, period = float64(l.Calendar), 0
	case KindConcurrency:
		rate, period = 0, float64(l.LeaseTTL.Microseconds())
	}
	b = appendF64(b, l.Burst, rate, period, shadow+2*float64(l.Kind), float64(n))
	for j := 0; j < nsub; j++ {
		if l.Subjects&(1<<uint(j)) != 0 {
			b = appendF64(b, float64(j+1))
		}
	}
	return b
}

// ownLimits counts the limits of req that decide.lua gives a device
// bucket of their own (trusted_devices: own, 7.1): none without a trust
// set and a device.
func ownLimits(req *Request) int {
	if req.OwnTrust == "" || req.Device == "" {
		return 0
	}
	n := 0
	for i := range req.Limits {
		if req.Limits[i].OwnKey != "" {
			n++
		}
	}
	return n
}

// appendF64 appends each of vs to b as a little-endian float64.
func appendF64(b []byte, vs ...float64) []byte {
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return b
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// lane collects queued calls into batches and runs them, until Close.
func (s *RedisStore) lane() {
	defer s.wg.Done()
	batch := make([]*call, 0, s.max)
	var buf batchBuf
	for {
		select {
		case c := <-s.queue:
			batch = append(batch[:0], c)
		case <-s.stop:
			return
		}
		if len(s.queue) == 0 {
			// Let callers a scheduler turn away join this batch: gRPC's
			// streams reach the store one by one, and a lane that left at
			// once carried one decision where it could carry several
			// (docs/benchmarks.md: 10.2 -> 12.7 decisions a batch).
			runtime.Gosched()
		}
	drain:
		for len(batch) < s.max {
			select {
			case c := <-s.queue:
				batch = append(batch, c)
			default:
				break drain
			}
		}
		s.run(batch, &buf)
	}
}

// batchBuf is a lane's reusable space for one batch's keys and arguments.
type batchBuf struct {
	keys []string
	args []interface{}
}

// fill lays calls out as one decide.lua batch (see its header), for
// EvalSha.
func (b *batchBuf) fill(calls []*call) (keys []string, args []interface{}) {
	b.keys, b.args = b.keys[:0], append(b.args[:0], len(calls))
	for _, c := range calls {
		b.keys = append(b.keys, c.keys...)
		b.args = append(b.args, c.blob, c.device)
	}
	return b.keys, b.args
}

// decideHash is decide.lua's SHA1, boxed once.
var decideHash interface{} = decideScript.Hash()

// evalsha lays calls out as the arguments of one EVALSHA of decide.lua,
// into dst: the same batch as fill, with every key and string passed by
// pointer into its call (go-redis writes *string as it writes string), so
// the batch costs no allocation per key or device. The calls must not change until
// the command has run.
func evalsha(dst []interface{}, calls []*call) []interface{} {
	nk := 0
	for _, c := range calls {
		nk += len(c.keys)
	}
	dst = append(dst[:0], "evalsha", decideHash, nk)
	for _, c := range calls {
		for i := range c.keys {
			dst = append(dst, &c.keys[i])
		}
	}
	dst = append(dst, len(calls))
	for _, c := range calls {
		dst = append(dst, c.blob, &c.device)
	}
	return dst
}

// run evaluates batch in one round trip (see exec) and hands each call
// its reply. Calls whose callers stopped waiting are left out, and the
// round trip lasts until the last caller's deadline at most.
func (s *RedisStore) run(batch []*call, buf *batchBuf) {
	now := time.Now()
	var last time.Time
	live := batch[:0]
	for _, c := range batch {
		if c.deadline.After(now) && !closed(c.gone) && c.state.CompareAndSwap(callQueued, callSent) {
			live = append(live, c)
			if c.deadline.After(last) {
				last = c.deadline
			}
		}
	}
	if batch = live; len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), last)
	defer cancel()
	replies, err := s.exec(ctx, batch, buf)
	if isNoScript(err) {
		// Redis lost its script cache (restart, SCRIPT FLUSH): load it once
		// and run the batch again. NOSCRIPT means nothing was evaluated.
		if lerr := decideScript.Load(ctx, s.c).Err(); lerr == nil {
			replies, err = s.exec(ctx, batch, buf)
		}
	}
	for i, c := range batch {
		switch {
		case err != nil:
			c.err = err
		case i >= len(replies) || replies[i].err != nil:
			if i < len(replies) {
				c.err = replies[i].err
			} else {
				c.err = fmt.Errorf("bucket: batch reply has %d entries for %d decisions", len(replies), len(batch))
			}
		default:
			c.reply = replies[i].val
		}
		c.done <- struct{}{}
	}
}

// closed reports whether ch is closed (false for nil).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// reply is one decision's answer within a batch.
type reply struct {
	val interface{}
	err error
}

// maxPerScript bounds the decisions one EVALSHA carries: Redis runs a
// script without serving anyone else, so a longer batch is split into
// several scripts sent in one pipeline (still one round trip). 32
// four-layer decisions hold Redis for about 1.8 ms on the slower of our
// 2-vCPU machines (BenchmarkRedisScriptCost).
const maxPerScript = 32

// exec evaluates batch in one round trip and returns one reply per call,
// or the error that failed them all.
func (s *RedisStore) exec(ctx context.Context, batch []*call, buf *batchBuf) ([]reply, error) {
	per := maxPerScript
	if s.cluster {
		per = 1 // one script's keys must share a slot; a batch's do not
	}
	if len(batch) <= per && !s.cluster {
		buf.args = evalsha(buf.args, batch)
		v, err := s.c.Do(ctx, buf.args...).Result()
		if err != nil {
			return nil, err
		}
		out := make([]reply, len(batch))
		return out, unbatch(v, out)
	}
	pipe := s.c.Pipeline()
	cmds := make([]*redis.Cmd, 0, (len(batch)+per-1)/per)
	for i := 0; i < len(batch); i += per {
		part := batch[i:min(i+per, len(batch))]
		if s.cluster {
			// EvalSha copies keys and args, so buf is free for the next
			// script, and routes the script by its first key
			keys, args := buf.fill(part)
			cmds = append(cmds, pipe.EvalSha(ctx, decideScript.Hash(), keys, args...))
		} else {
			// each script of the pipeline holds its own arguments until Exec
			cmds = append(cmds, pipe.Do(ctx, evalsha(nil, part)...))
		}
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	s.evalNoScript(ctx, batch, per, cmds, buf)
	out := make([]reply, len(batch))
	for k, cmd := range cmds {
		part := out[k*per : min((k+1)*per, len(batch))]
		err := cmd.Err()
		if err == nil {
			err = unbatch(cmd.Val(), part)
		}
		for i := range part {
			if err != nil {
				part[i].err = err
			}
		}
	}
	return out, nil
}

// evalNoScript sends again, with EVAL, the scripts of a pipeline (cmds,
// per calls of batch each) that a node answered NOSCRIPT, and puts their
// new commands in cmds. On a Cluster one node may have lost its script
// cache (a replica just promoted, a master restarted: the cache is not
// replicated) while the others ran theirs and took their tokens: only the
// scripts that did not run are sent again, never the whole batch, which
// would charge the others twice. EVAL also caches the script on that
// node.
func (s *RedisStore) evalNoScript(ctx context.Context, batch []*call, per int, cmds []*redis.Cmd, buf *batchBuf) {
	var pipe redis.Pipeliner
	for k, cmd := range cmds {
		if !isNoScript(cmd.Err()) {
			continue
		}
		if pipe == nil {
			pipe = s.c.Pipeline()
		}
		part := batch[k*per : min((k+1)*per, len(batch))]
		if s.cluster {
			keys, args := buf.fill(part)
			cmds[k] = pipe.Eval(ctx, decideSource, keys, args...)
		} else {
			args := evalsha(nil, part)
			args[0], args[1] = "eval", decideSource
			cmds[k] = pipe.Do(ctx, args...)
		}
	}
	if pipe != nil {
		_, _ = pipe.Exec(ctx)
	}
}

// unbatch spreads a batch reply over out, one entry per decision.
func unbatch(v interface{}, out []reply) error {
	vals, ok := v.([]interface{})
	if !ok || len(vals) != len(out) {
		return fmt.Errorf("bucket: unexpected batch reply %T for %d decisions", v, len(out))
	}
	for i := range vals {
		out[i].val, out[i].err = unwrapReply(vals[i])
	}
	return nil
}

// isNoScript reports whether err is Redis's NOSCRIPT (its script cache
// lost decide.lua).
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// firstOf returns the only entry of a batch-of-one reply (v itself when
// it is not one, for parseDecision to reject).
func firstOf(v interface{}) interface{} {
	if vals, ok := v.([]interface{}); ok && len(vals) == 1 {
		return vals[0]
	}
	return v
}

// unwrapReply turns a decision's {3, message} entry into an error.
func unwrapReply(v interface{}) (interface{}, error) {
	if vals, ok := v.([]interface{}); ok && len(vals) == 2 {
		if st, _ := vals[0].(int64); st == 3 {
			msg, _ := vals[1].(string)
			return nil, errors.New("bucket: decide: " + msg)
		}
	}
	return v, nil
}

// parseDecision turns decide.lua's reply into res, checking its shape.
func parseDecision(reply interface{}, req *Request, res *Result) error {
	res.Allowed, res.Locked, res.Lock, res.LockIndex, res.Trusted = false, false, Lock{}, 0, false
	res.Limits = res.Limits[:0]
	res.Subjects = res.Subjects[:0]
	if packed, ok := reply.(string); ok {
		return parsePacked(packed, req, res)
	}
	vals, ok := reply.([]interface{})
	if !ok || len(vals) != 6 {
		return fmt.Errorf("bucket: unexpected reply %T", reply)
	}
	status, ok1 := vals[0].(int64)
	now, ok2 := vals[1].(int64)
	if !ok1 || !ok2 || status != 2 {
		return fmt.Errorf("bucket: unexpected reply head %v %v", vals[0], vals[1])
	}
	res.Now = time.UnixMicro(now)
	idx, _ := vals[5].(int64)
	kind, _ := vals[2].(string)
	rule, _ := vals[4].(string)
	until, err := usAt(vals[3])
	if err != nil {
		return err
	}
	res.Locked, res.Lock, res.LockIndex = true, Lock{Kind: kind, Rule: rule, Until: until}, int(idx)-1
	return nil
}

// parsePacked reads decide.lua's reply of a decision that was evaluated:
// little-endian float64s (see decide.lua). A bucket's reply is its tokens
// and whether it allowed; its effective burst, reset and retry are
// computed here, by the arithmetic evaluate() shares with the script and
// into a result as the memory store's (eval.resultTo), from
// the limit's numbers and the subjects' multipliers (the script's for the
// subjects it read, the request's for those the caller's cache knew).
func parsePacked(b string, req *Request, res *Result) error {
	limitNums, n, own := replyLayout(req)
	if len(b) != 8*n {
		return fmt.Errorf("bucket: reply of %d bytes for %d limits and %d subjects", len(b), len(req.Limits), len(req.Subjects))
	}
	r := packedReply(b)
	res.Allowed = r.at(0) == 1
	now := r.at(1)
	res.Now = time.UnixMicro(int64(now))
	var multsA, pensA [MaxSubjects]float64
	mults, pens := r.subjects(2+limitNums, req, res, multsA[:0], pensA[:0])
	cost := math.Floor(req.Cost * unit)
	k := 2
	for i := range req.Limits {
		l := &req.Limits[i]
		tokens, ok := r.at(k), true
		if tokens < 0 {
			tokens, ok = -1-tokens, false
		}
		k++
		ev := eval{kind: l.Kind, tokens: tokens, ok: ok}
		if l.Kind != KindBucket {
			ev.effb, ev.reset, ev.retry = r.at(k), r.at(k+1), r.at(k+2)
			k += 3
		} else {
			m, pend, unknown := limitMultiplier(l.Subjects, mults, pens, len(req.Subjects))
			ev.effb, ev.per = scaled(l, m)
			if !ok {
				ev.retry = bucketRetry(tokens, cost, ev.effb, ev.per, pend, unknown, now)
			}
		}
		res.Limits = append(res.Limits, LimitResult{})
		ev.resultTo(&res.Limits[len(res.Limits)-1], now, l) // as the memory store's results
	}
	res.Trusted = own && r.at(n-1) == 1
	return nil
}

// replyLayout returns how many numbers decide.lua's reply to req holds for
// its limits and in all, and whether it ends with the device's trust.
func replyLayout(req *Request) (limitNums, n int, own bool) {
	for i := range req.Limits {
		limitNums++
		if req.Limits[i].Kind != KindBucket {
			limitNums += 3 // burst, reset, retry
		}
	}
	n = 2 + limitNums
	for j := range req.Subjects {
		if !req.Subjects[j].Cached {
			n += 2 // mult, pen
		}
	}
	own = ownLimits(req) > 0
	if own {
		n++
	}
	return limitNums, n, own
}

// packedReply is a reply of little-endian float64s.
type packedReply string

// at returns the reply's i-th number.
func (r packedReply) at(i int) float64 {
	return math.Float64frombits(binary.LittleEndian.Uint64([]byte(r[8*i : 8*i+8])))
}

// subjects reads the multipliers of the subjects the script read, from the
// reply's k-th number on, into res, and returns every subject's multiplier
// and penalty end (the request's for a cached subject) appended to mults
// and pens.
func (r packedReply) subjects(k int, req *Request, res *Result, mults, pens []float64) ([]float64, []float64) {
	for j := range req.Subjects {
		sub := &req.Subjects[j]
		if sub.Cached {
			mults, pens = append(mults, sub.Mult), append(pens, sub.Pen)
			res.Subjects = append(res.Subjects, SubjectResult{})
			continue
		}
		m, p := r.at(k), r.at(k+1)
		mults, pens = append(mults, m), append(pens, p)
		res.Subjects = append(res.Subjects, SubjectResult{Read: true, Mult: m, Pen: p})
		k += 2
	}
	return mults, pens
}

func usAt(v interface{}) (time.Time, error) {
	s, ok := v.(string)
	if !ok {
		return time.Time{}, fmt.Errorf("bucket: unexpected time %T", v)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("bucket: time %q: %w", s, err)
	}
	return time.UnixMicro(int64(f)), nil
}

var _ Store = (*RedisStore)(nil)

// topologyReloader is the part of go-redis's ClusterClient that reloads
// its slot map in the background.
type topologyReloader interface{ ReloadState(ctx context.Context) }

// refreshEvery bounds how often a failing Cluster store reloads its map.
const refreshEvery = 200 * time.Millisecond

// refreshOnFailure returns err; when a Cluster decision failed for want of
// an answer, it first has the client reload its slot map (at most once
// per refreshEvery). go-redis reloads the map on MOVED replies and
// otherwise only every minute, so without this a running limiter kept
// sending a failed master's slots to the dead address long after its
// replica was promoted (7.6); with it, decisions are exact again within
// a reload of the promotion.
func (s *RedisStore) refreshOnFailure(err error) error {
	if err == nil || !s.cluster || !errors.Is(err, ErrUnavailable) {
		return err
	}
	r, ok := s.c.(topologyReloader)
	if !ok {
		return err
	}
	now, last := time.Now().UnixNano(), s.refreshed.Load()
	if now-last >= int64(refreshEvery) && s.refreshed.CompareAndSwap(last, now) {
		r.ReloadState(context.Background())
	}
	return err
}
