package bucket

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis Cluster.
//
// A decision's keys are tagged by subject, so one subject's buckets,
// multipliers and lock share a slot, but a decision usually spans several
// subjects and so several slots, which one script cannot touch. On a
// Cluster such a decision runs in two or three steps:
//
//  1. read: the subjects' multipliers, the locks and trust sets, and
//     Redis's TIME (the decision's one clock), in one pipeline;
//     multipliers are combined and locks judged in Go by the same rules as
//     decide.lua (the memory store's code);
//  2. decide: decide.lua once per slot, for that slot's buckets, with the
//     subjects passed in as known (Cached) and that time as now, all slots
//     in one pipeline;
//     each slot takes its tokens only if all of its limits allow;
//  3. refund: when a slot denied, the slots that took give their tokens
//     back (refund.lua), so a denied request takes nothing in the end.
//
// Between 2 and 3 other requests may see the taken tokens missing and be
// denied: on a Cluster, all-or-nothing can be stricter than on one node,
// never more lenient. N concurrent requests on one bucket still admit
// exactly its capacity (one slot, one script). Decisions whose keys share
// a slot take the single-script path.

// refundSource gives tokens back to the limits a decision took from.
// KEYS: the limits; ARGV[1] micro-tokens to give back; ARGV[2] the
// decision's lease; ARGV[2+i] the effective burst of bucket i (the cap),
// or "q" for a quota (its count goes down by the cost) or "c" for a
// concurrency limit (the lease leaves its set).
const refundSource = `
local cost = tonumber(ARGV[1])
for i = 1, #KEYS do
  local kind = ARGV[2 + i]
  local v = nil
  if kind == "c" then
    redis.call("ZREM", KEYS[i], ARGV[2])
  else
    v = redis.call("GET", KEYS[i])
  end
  if v and kind == "q" then
    local used, start = struct.unpack("<dd", v)
    used = used - cost
    if used < 0 then used = 0 end
    redis.call("SET", KEYS[i], struct.pack("<dd", used, start), "KEEPTTL")
  elseif v then
    -- decide.lua's state: tokens and last_us as two packed float64s, or
    -- the text "tokens last_us" of earlier builds
    local t, l
    if #v == 16 then
      t, l = struct.unpack("<dd", v)
    else
      t, l = string.match(v, "^(%d+) (%d+)$")
      t, l = tonumber(t), tonumber(l)
    end
    if t and l then
      t = t + cost
      local cap = tonumber(ARGV[2 + i])
      if t > cap then t = cap end
      redis.call("SET", KEYS[i], struct.pack("<dd", t, l), "KEEPTTL")
    end
  end
end
return 1`

// Slot returns the Redis Cluster hash slot of key (its hash tag's, when
// it has one).
func Slot(key string) uint16 { return slotOf(key) }

// slotOf returns the Redis Cluster hash slot of key.
func slotOf(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) % 16384
}

// crc16 is CRC-16/XMODEM, Redis Cluster's key hash.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// sameSlot reports whether every key of req hashes to one slot.
func sameSlot(req *Request) bool {
	first, set := uint16(0), false
	same := func(k string) bool {
		if k == "" {
			return true
		}
		sl := slotOf(k)
		if !set {
			first, set = sl, true
		}
		return sl == first
	}
	own := ownLimits(req) > 0
	for i := range req.Limits {
		if !same(req.Limits[i].Key) || own && !same(req.Limits[i].OwnKey) {
			return false
		}
	}
	if own && !same(req.OwnTrust) {
		return false
	}
	for i := range req.Subjects {
		if !req.Subjects[i].Cached && !same(req.Subjects[i].Key) {
			return false
		}
	}
	for _, k := range req.Locks {
		if !same(k) {
			return false
		}
	}
	for _, k := range req.TrustKeys {
		if !same(k) {
			return false
		}
	}
	return true
}

// decideCluster evaluates a decision whose keys span several slots, in
// three steps that share the decision's deadline: read (subjects, locks,
// trust, one clock), decide (one script per slot), refund (when a slot
// denied, the slots that took give their tokens back).
func (s *RedisStore) decideCluster(ctx context.Context, req *Request, res *Result) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout) // all steps: the decision's deadline
	defer cancel()
	res.Allowed, res.Locked, res.Lock, res.LockIndex, res.Trusted = false, false, Lock{}, 0, false
	res.Limits, res.Subjects = res.Limits[:0], res.Subjects[:0]
	subs, now, err := s.clusterRead(ctx, req, res)
	if err != nil || res.Locked {
		return err
	}
	groups := slotGroups(req, subs, now, res.Trusted)
	if err := s.clusterDecide(ctx, groups); err != nil {
		// the slots' scripts were sent: those that ran kept what they took
		return fmt.Errorf("%w: %w", ErrUnanswered, err)
	}
	allowed := true
	for _, g := range groups {
		allowed = allowed && g.res.Allowed
	}
	var refundErr error
	if !allowed && req.Cost > 0 {
		refundErr = s.clusterRefund(ctx, req, groups)
	}
	out := make([]LimitResult, len(req.Limits))
	for _, g := range groups {
		for k, i := range g.limits {
			out[i] = g.res.Limits[k]
		}
	}
	if refundErr != nil {
		return fmt.Errorf("%w: %w", ErrUnanswered, refundErr)
	}
	res.Allowed = allowed
	res.Limits = append(res.Limits, out...)
	return nil
}

// trustReadScript reads a device's end in a trust set, for a Cluster
// decision's read (decide.lua's isTrusted, judged in Go once the clock is
// read): its score (µs), "set" for a member of a plain set of an older
// version, nil when it is not a member. KEYS[1] set; ARGV[1] device.
var trustReadScript = redis.NewScript(`
local s = redis.pcall("ZSCORE", KEYS[1], ARGV[1])
if type(s) == "table" and s.err then
  if redis.call("SISMEMBER", KEYS[1], ARGV[1]) == 1 then return "set" end
  return false
end
return s`)

// trustedAt reports whether a trustReadScript answer trusts the device at
// nowUS; no answer (no device, no trust set asked) is false.
func trustedAt(cmd *redis.Cmd, nowUS float64) bool {
	if cmd == nil {
		return false
	}
	v, err := cmd.Text()
	if err != nil {
		return false
	}
	if v == "set" {
		return true
	}
	end, err := strconv.ParseFloat(v, 64)
	return err == nil && end > nowUS
}

// clusterRead reads a multi-slot decision's multipliers, locks and trust
// sets, and Redis's TIME (unless the caller injected a time: one clock for
// every step), in one pipeline. It judges the locks (res.Locked when one
// is in force) and returns the subjects as known to the per-slot scripts,
// and the decision's time.
func (s *RedisStore) clusterRead(ctx context.Context, req *Request, res *Result) ([]RequestSubject, time.Time, error) {
	pipe := s.c.Pipeline()
	var clock *redis.Cmd
	if req.Now.IsZero() {
		clock = timeScript.Eval(ctx, pipe, []string{firstKey(req)})
	}
	hashes := make([]*redis.MapStringStringCmd, len(req.Subjects))
	for j := range req.Subjects {
		if !req.Subjects[j].Cached {
			hashes[j] = pipe.HGetAll(ctx, req.Subjects[j].Key)
		}
	}
	locks := make([]*redis.StringCmd, len(req.Locks))
	trusted := make([]*redis.Cmd, len(req.Locks))
	for i, k := range req.Locks {
		locks[i] = pipe.Get(ctx, k)
		if i < len(req.TrustKeys) && req.TrustKeys[i] != "" && req.Device != "" {
			trusted[i] = trustReadScript.Eval(ctx, pipe, []string{req.TrustKeys[i]}, req.Device)
		}
	}
	var ownTrust *redis.Cmd // trusted_devices: own (7.1)
	if ownLimits(req) > 0 {
		ownTrust = trustReadScript.Eval(ctx, pipe, []string{req.OwnTrust}, req.Device)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, time.Time{}, fmt.Errorf("%w: cluster read: %w", ErrUnavailable, err)
	}
	now, err := clusterNow(req, clock)
	if err != nil {
		return nil, time.Time{}, err
	}
	nowUS := float64(now.UnixMicro())
	res.Now = now
	res.Trusted = trustedAt(ownTrust, nowUS)
	for i, cmd := range locks {
		l, ok := parseLock(cmd.Val())
		if !ok || float64(l.Until.UnixMicro()) <= nowUS {
			continue
		}
		if l.Exempt && trustedAt(trusted[i], nowUS) {
			continue
		}
		res.Locked, res.Lock, res.LockIndex = true, l, i
		return nil, now, nil
	}
	subs := make([]RequestSubject, len(req.Subjects))
	for j := range req.Subjects {
		subs[j] = req.Subjects[j]
		if subs[j].Cached {
			res.Subjects = append(res.Subjects, SubjectResult{})
			continue
		}
		m, p := combineAt(subs[j].Static, subs[j].Unverified, parseMultipliers(hashes[j].Val()), nowUS)
		subs[j].Cached, subs[j].Mult, subs[j].Pen = true, m, p
		res.Subjects = append(res.Subjects, SubjectResult{Read: true, Mult: m, Pen: p})
	}
	return subs, now, nil
}

// slotGroup is the part of a multi-slot decision in one slot.
type slotGroup struct {
	limits []int // indexes into the decision's limits
	req    Request
	res    Result
}

// slotGroups splits req's limits by slot (each limit's bucket chosen by
// trusted), each group a request of its own whose subjects are passed in
// as known (subs), so its script touches its slot alone.
func slotGroups(req *Request, subs []RequestSubject, now time.Time, trusted bool) []*slotGroup {
	var groups []*slotGroup
	bySlot := map[uint16]*slotGroup{}
	for i := range req.Limits {
		sl := slotOf(limitKey(&req.Limits[i], trusted))
		g := bySlot[sl]
		if g == nil {
			g = &slotGroup{}
			bySlot[sl] = g
			groups = append(groups, g)
		}
		g.limits = append(g.limits, i)
	}
	for _, g := range groups {
		g.req = Request{Now: now, Cost: req.Cost, Lease: req.Lease}
		slotKey := limitKey(&req.Limits[g.limits[0]], trusted)
		remap := map[int]int{} // subject index in req -> in g.req
		for _, i := range g.limits {
			l := req.Limits[i]
			l.Key, l.OwnKey = limitKey(&l, trusted), "" // the bucket chosen above
			var mask uint32
			for j := range subs {
				if l.Subjects&(1<<uint(j)) == 0 {
					continue
				}
				k, ok := remap[j]
				if !ok {
					k = len(g.req.Subjects)
					remap[j] = k
					sub := subs[j]
					sub.Key = slotKey // known, never read: keep the script in one slot
					g.req.Subjects = append(g.req.Subjects, sub)
				}
				mask |= 1 << uint(k)
			}
			l.Subjects = mask
			g.req.Limits = append(g.req.Limits, l)
		}
	}
	return groups
}

// clusterDecide runs one script per slot group, all in one pipeline, and
// fills each group's result; each slot takes its tokens only if all its
// limits allow. A slot whose master answered NOSCRIPT (its script cache
// lost: a replica just promoted) is sent again alone, with EVAL: the
// other slots' scripts ran and took their tokens, and starting the whole
// decision over would charge them twice.
func (s *RedisStore) clusterDecide(ctx context.Context, groups []*slotGroup) error {
	cmds := make([]*redis.Cmd, len(groups))
	calls := make([]*call, len(groups))
	pipe := s.c.Pipeline()
	var buf batchBuf
	for gi, g := range groups {
		c := &call{}
		c.build(&g.req, s.slack)
		calls[gi] = c
		keys, args := buf.fill([]*call{c})
		cmds[gi] = pipe.EvalSha(ctx, decideScript.Hash(), keys, args...)
	}
	_, _ = pipe.Exec(ctx)
	s.evalNoScript(ctx, calls, 1, cmds, &buf)
	for gi, g := range groups {
		if err := cmds[gi].Err(); err != nil {
			return fmt.Errorf("%w: cluster decide: %w", ErrUnavailable, err)
		}
		v, err := unwrapReply(firstOf(cmds[gi].Val()))
		if err != nil {
			return fmt.Errorf("%w: cluster decide: %w", ErrUnavailable, err)
		}
		if err := parseDecision(v, &g.req, &g.res); err != nil {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	return nil
}

// clusterRefund gives back the tokens of the slots that took, when
// another slot denied, so a denied decision takes nothing in the end.
// Tokens not given back (an error) only make a bucket stricter until it
// refills.
func (s *RedisStore) clusterRefund(ctx context.Context, req *Request, groups []*slotGroup) error {
	pipe := s.c.Pipeline()
	cost := ftoa(float64(int64(req.Cost * unit)))
	var refund []*redis.Cmd
	for _, g := range groups {
		if !g.res.Allowed {
			continue
		}
		var keys []string
		args := []interface{}{cost, req.Lease}
		for k := range g.req.Limits {
			if g.res.Limits[k].Allowed {
				l := &g.req.Limits[k]
				keys = append(keys, l.Key)
				args = append(args, refundArg(l, g.res.Limits[k].Burst))
				g.res.Limits[k].Remaining += refunded(l, req.Cost)
			}
		}
		if len(keys) > 0 {
			// EVAL, not EVALSHA: refunds are rare and must not fail on NOSCRIPT
			refund = append(refund, pipe.Eval(ctx, refundSource, keys, args...))
		}
	}
	if len(refund) == 0 {
		return nil
	}
	_, _ = pipe.Exec(ctx)
	for _, c := range refund {
		if err := c.Err(); err != nil {
			return fmt.Errorf("%w: cluster refund: %w", ErrUnavailable, err)
		}
	}
	return nil
}

// refundArg is refundSource's argument for limit l of effective burst
// burst: the cap of a bucket, the kind of the others.
func refundArg(l *Limit, burst float64) string {
	switch l.Kind {
	case KindQuota:
		return "q"
	case KindConcurrency:
		return "c"
	}
	return ftoa(burst * unit)
}

// refunded is what a refund gives back to l's Remaining: the cost, or the
// one slot of a concurrency limit.
func refunded(l *Limit, cost float64) float64 {
	if l.Kind == KindConcurrency {
		return 1
	}
	return float64(int64(cost*unit)) / unit
}

// firstKey returns a key of req, whose node's TIME is the decision's clock.
func firstKey(req *Request) string {
	switch {
	case len(req.Limits) > 0:
		return req.Limits[0].Key
	case len(req.Locks) > 0:
		return req.Locks[0]
	}
	for i := range req.Subjects {
		if !req.Subjects[i].Cached {
			return req.Subjects[i].Key
		}
	}
	return ""
}

// clusterNow returns the decision time of a Cluster decision: the
// caller's, else the TIME read with its data (truncated to µs, as
// decide.lua keeps time).
func clusterNow(req *Request, clock *redis.Cmd) (time.Time, error) {
	if clock == nil {
		return time.UnixMicro(req.Now.UnixMicro()), nil
	}
	v, err := clock.Result()
	if err == nil {
		var now time.Time
		if now, _, err = timedReply(v, 2); err == nil {
			return now, nil
		}
	}
	return time.Time{}, fmt.Errorf("%w: cluster time: %w", ErrUnavailable, err)
}

// parseLock parses a lock value "kind until_us flags rule".
func parseLock(v string) (Lock, bool) {
	parts := strings.SplitN(v, " ", 4)
	if len(parts) < 3 {
		return Lock{}, false
	}
	us, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return Lock{}, false
	}
	l := Lock{Kind: parts[0], Until: time.UnixMicro(us), Exempt: parts[2] == "x"}
	if len(parts) == 4 {
		l.Rule = parts[3]
	}
	return l, true
}

// parseMultipliers parses a multiplier hash (source -> "value expires_us reason").
func parseMultipliers(h map[string]string) map[string]Multiplier {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string]Multiplier, len(h))
	for src, v := range h {
		parts := strings.SplitN(v, " ", 3)
		if len(parts) < 2 {
			continue
		}
		val, err1 := strconv.ParseFloat(parts[0], 64)
		exp, err2 := strconv.ParseInt(parts[1], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		m := Multiplier{Source: src, Value: val}
		if exp != 0 {
			m.ExpiresAt = time.UnixMicro(exp)
		}
		if len(parts) == 3 {
			m.Reason = parts[2]
		}
		out[src] = m
	}
	return out
}
