package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/reputation"
)

// Outcome is what a decision concluded.
type Outcome uint8

// Outcomes, in the order the API maps them to statuses.
const (
	// Allowed: every enforced limit had the tokens (200).
	Allowed Outcome = iota
	// Limited: a limit denied (429 RATE_LIMITED).
	Limited
	// Locked: the account is locked out (429 ACCOUNT_LOCKED).
	Locked
	// StepUp: the account must pass step-up first (403 STEP_UP_REQUIRED).
	StepUp
	// Unavailable: the store is down and a limit fails closed (503).
	Unavailable
	// Degraded: the store is down and every limit fails open (200 + X-RateLimit-Degraded).
	Degraded
	// AllowedList: the request is on an allow list, exempt from every
	// limit (200, no store call).
	AllowedList
	// DeniedList: the request is on a deny list (403 DENIED, no store call).
	DeniedList
)

// String returns the outcome's metric result label.
func (o Outcome) String() string {
	switch o {
	case Limited:
		return ResultLimited
	case Locked:
		return ResultLocked
	case StepUp:
		return ResultStepUp
	case Unavailable:
		return ResultUnavailable
	case Degraded:
		return ResultDegraded
	case AllowedList:
		return ResultAllowedList
	case DeniedList:
		return ResultDeniedList
	}
	return ResultAllowed
}

// Input is one request to decide on. IP is required; an empty Endpoint
// means the request matches no route (class DefaultClass), as an Envoy
// descriptor set without a method and path does.
type Input struct {
	// Endpoint is "METHOD /path".
	Endpoint string
	// IP is the client address, already validated.
	IP string
	// Addr is IP parsed, when the caller has it (saves a parse for
	// reputation lookups); the zero value means parse IP.
	Addr netip.Addr
	// UserID, DeviceID, Account and ASN are optional key parts; a limit
	// keyed by a part the request lacks does not apply to it. A non-empty
	// UserID means the request is authenticated.
	UserID, DeviceID, Account, ASN string
	// Attributes are the request's attributes (CONTRACT 6.9), already
	// validated (policy.CheckAttribute, at most policy.MaxAttributes): the
	// values of `attr:NAME` key parts and `if.attr` conditions. nil means
	// none. The engine only reads the map.
	Attributes map[string]string
	// Cost is the number of tokens to take (>= 0).
	Cost float64
	// Now, when set, is the decision time for stores with an injected
	// clock (tests); the zero value is the store's clock.
	Now time.Time
	// Static holds multipliers the caller already knows per subject kind
	// (reputation), indexed by policy.KeyPart, where StaticSet says so
	// (0 is a valid multiplier: it blocks).
	Static    [8]float64
	StaticSet [8]bool
	// Unverified, when UnverifiedSet, is the device subject's multiplier
	// while it has no valid attestation (policy unverified_multiplier).
	Unverified    float64
	UnverifiedSet bool
	// DeviceToken is the device token the request presented (6.3), for
	// the caller to verify; the engine never reads it.
	DeviceToken string
	// DeviceVerified reports that the request presented a valid device
	// token for DeviceID (6.3): only then does the device count as
	// attested (the policy's verified_multiplier applies to its device
	// subject, and exempt_attested locks spare it when it is in the
	// account's trusted devices). Otherwise unverified_multiplier applies,
	// whatever is stored for the device.
	DeviceVerified bool

	// ipKey is the ip key part's value (IPKey), set by Decide.
	ipKey string
}

// Decision is the outcome of Decide. It can be reused across calls.
type Decision struct {
	Outcome Outcome
	// Class is the request's route class; Route the matched route's
	// `match` ("" when none matched).
	Class, Route string
	// Binding is the binding limit (nil when no limit applied).
	Binding *policy.Limit
	// Limit is the binding limit's effective burst, Remaining its whole
	// tokens left, Reset when it is full again, Window its rate's period.
	Limit, Remaining int64
	Reset            time.Time
	Window           time.Duration
	// RetryAfter is the exact wait for Cost tokens (Limited), the lock's
	// time left (Locked) or a hint (Unavailable).
	RetryAfter time.Duration
	// Lock describes the lock of a Locked or StepUp outcome; LockScope is
	// the subject kind it is on ("account", "ip", "user" or "device").
	Lock      bucket.Lock
	LockScope string
	// Now is the decision time.
	Now time.Time
	// Err is the store error behind Unavailable and Degraded.
	Err error
	// List is the list that decided an AllowedList or DeniedList outcome.
	List *policy.List
	// fromL1 is set when the L1 cache answered without the store.
	fromL1 bool
	// abandoned is set when the caller went away before the store
	// answered: the failure mode answered, counted as abandoned.
	abandoned bool
	// lease is the lease id of the slots the decision took (LeaseID).
	lease string

	applied []*policy.Limit
	breq    bucket.Request
	bres    bucket.Result
	keybuf  []byte
	spans   []span
}

// span is one key in Decision.keybuf: where it ends and what it is.
type span struct {
	end  int
	kind uint8 // spanBucket, spanSubject or spanLock
}

const (
	spanBucket uint8 = iota
	spanSubject
	spanLock
	spanTrust    // the trust set of the lock just before it
	spanOwn      // the own bucket of the limit just before it (trusted_devices: own)
	spanOwnTrust // the trust set that decides whether own buckets are used
)

// LeaseID returns the lease id of the concurrency slots an Allowed
// decision took ("" when it took none): Engine.Release frees them.
func (d *Decision) LeaseID() string { return d.lease }

// FromL1 reports whether the L1 cache answered without asking the store.
func (d *Decision) FromL1() bool { return d.fromL1 }

// Applied returns the limits that applied to the request, in policy order.
func (d *Decision) Applied() []*policy.Limit { return d.applied }

// LimitResult returns the store's result for the i-th applied limit (valid
// when Outcome is Allowed or Limited).
func (d *Decision) LimitResult(i int) bucket.LimitResult { return d.bres.Limits[i] }

// Options configures an Engine.
type Options struct {
	// Store is the bucket store (required).
	Store bucket.Store
	// Policy returns the policy in force (required); it is called once per decision.
	Policy func() *policy.Policy
	// Prefix starts every key of a decision; it must be the store's
	// (default: Store.Prefix()).
	Prefix string
	// Metrics, when set, records every decision.
	Metrics *Metrics
	// Breaker guards the store (default NewBreaker with default options).
	Breaker *Breaker
	// UnavailableRetry is the Retry-After hint of a 503 (default 1s).
	UnavailableRetry time.Duration
	// Clock measures decision time for metrics (default time.Now).
	Clock func() time.Time
	// L1, when set, answers known denials locally (see L1); changes made
	// through L1.Wrap(Store) drop its entries of their subject.
	L1 *L1
	// Reputation, when set, returns the reputation rules in force: the
	// request's ASN becomes its `asn` key part and the rules' multipliers
	// apply to its ip and asn subjects from the first request on.
	Reputation func() *reputation.Rules
}

// Engine decides. It is safe for concurrent use.
type Engine struct {
	o          Options
	localClock bool // the store keeps time in process: hand it our clock read
	// borrowKeys: the store is a bare *bucket.MemoryStore, which keeps no
	// request key past Decide, and there is no L1 (it keeps keys), so the
	// keys may alias the Decision's key buffer (no string built per
	// decision). Never for Redis (a call that timed out may still hold its
	// keys) nor for a wrapper (it may keep them).
	borrowKeys bool
	obs        atomic.Pointer[obsCache]
	// multKeys are the multiplier key templates by subject key part;
	// bucketKeys those of the policy in force's bucket keys.
	multKeys   [len(subjectKinds)]bucket.KeyTemplate
	claimKeys  bucket.KeyTemplate // the claim subject's (claims.go)
	bucketKeys atomic.Pointer[bucketKeys]
	lockPlan   atomic.Pointer[lockPlan] // locks.go
}

// bucketKeys are the bucket key templates of a policy's limits tagged by
// a subject or global (by Limit.Index; zero for those tagged by an
// attribute), built once per policy.
type bucketKeys struct {
	p    *policy.Policy
	keys []bucket.KeyTemplate
}

// New returns an Engine, validating o.
func New(o Options) (*Engine, error) {
	if o.Store == nil || o.Policy == nil {
		return nil, errors.New("engine: store and policy are required")
	}
	if o.Prefix == "" {
		o.Prefix = o.Store.Prefix()
	}
	if o.Prefix != o.Store.Prefix() {
		return nil, fmt.Errorf("engine: key prefix %q is not the store's %q", o.Prefix, o.Store.Prefix())
	}
	if o.Breaker == nil {
		o.Breaker = NewBreaker(BreakerOptions{}, nil, nil)
	}
	if o.UnavailableRetry <= 0 {
		o.UnavailableRetry = time.Second
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	lc, _ := o.Store.(interface{ LocalClock() bool })
	_, mem := o.Store.(*bucket.MemoryStore)
	e := &Engine{o: o, localClock: lc != nil && lc.LocalClock(), borrowKeys: mem && o.L1 == nil}
	for part, kind := range subjectKinds {
		if kind != "" {
			e.multKeys[part] = bucket.NewMultiplierKeyTemplate(o.Prefix, kind)
		}
	}
	e.claimKeys = bucket.NewMultiplierKeyTemplate(o.Prefix, ClaimSubject)
	return e, nil
}

// bucketKeysOf returns the bucket key templates of p.
func (e *Engine) bucketKeysOf(p *policy.Policy) *bucketKeys {
	if bk := e.bucketKeys.Load(); bk != nil && bk.p == p {
		return bk
	}
	bk := &bucketKeys{p: p, keys: make([]bucket.KeyTemplate, len(p.Limits))}
	for i := range p.Limits {
		l := &p.Limits[i]
		if len(l.By) == 0 {
			continue
		}
		if tag := l.By[tagPart(l)]; tag != policy.PartAttr {
			bk.keys[i] = bucket.NewBucketKeyTemplate(e.o.Prefix, tag.String(), l.Name)
		}
	}
	e.bucketKeys.Store(bk)
	return bk
}

// Policy returns the policy in force.
func (e *Engine) Policy() *policy.Policy { return e.o.Policy() }

// Reputation returns the reputation rules in force (nil when none).
func (e *Engine) Reputation() *reputation.Rules {
	if e.o.Reputation == nil {
		return nil
	}
	return e.o.Reputation()
}

// Breaker returns the store's circuit breaker.
func (e *Engine) Breaker() *Breaker { return e.o.Breaker }

var decisionPool = sync.Pool{New: func() any { return new(Decision) }}

// GetDecision returns a Decision from a pool; PutDecision gives it back.
func GetDecision() *Decision { return decisionPool.Get().(*Decision) }

// PutDecision returns d to the pool; d must not be used afterwards.
func PutDecision(d *Decision) { decisionPool.Put(d) }

// subjectKinds maps key parts to subject names for multiplier keys.
var subjectKinds = [...]string{
	policy.PartIP: "ip", policy.PartUser: "user", policy.PartDevice: "device",
	policy.PartAccount: "account", policy.PartASN: "asn",
}

// Decide decides on in and fills d. It returns an error only for an input
// the engine cannot evaluate (a bug in the caller: the api validates
// first); store failures become Unavailable or Degraded. A request on a
// deny or allow list of the policy is decided without a store call
// (DeniedList, AllowedList; deny wins).
func (e *Engine) Decide(ctx context.Context, in *Input, d *Decision) error {
	start := e.o.Clock()
	p := e.o.Policy()
	ci, route, err := routeOf(p, in.Endpoint)
	if err != nil {
		return err
	}
	if e.o.Reputation != nil {
		e.reputation(in)
	}
	verified, verifiedDevice := attestation(p, in)
	in.ipKey = IPKey(p, in.IP, in.Addr)
	*d = Decision{applied: d.applied[:0], breq: d.breq, bres: d.bres, keybuf: d.keybuf[:0], spans: d.spans[:0]}
	d.Class = p.Classes[ci]
	routeVal := policy.DefaultClass
	if route != nil {
		d.Route = route.Match
		routeVal = route.Match
	}
	if p.HasLists() && e.listed(p, in, d) {
		if d.Outcome != AllowedList || !e.allowListLocks(ctx, p, ci, in, d, verifiedDevice, start) {
			d.Now = start
		}
		e.record(d, p, start)
		return nil
	}
	req := e.request(d, in, verifiedDevice, start)
	e.appendLimits(p, ci, in, d, routeVal, verified, verifiedDevice)
	locks := e.appendLocks(p, ci, in, d, verifiedDevice)
	if len(req.Limits) == 0 && !locks {
		d.Outcome = Allowed
		d.Now = start
		e.record(d, p, start)
		return nil
	}
	handOutKeys(d, req, e.borrowKeys)
	return e.decideStore(ctx, p, ci, d, req, start)
}

// reputation fills the request's ASN and its ip and asn static
// multipliers from the reputation rules in force (unless set already).
func (e *Engine) reputation(in *Input) {
	rules := e.o.Reputation()
	if rules == nil {
		return
	}
	ip := in.Addr
	if !ip.IsValid() {
		ip, _ = netip.ParseAddr(in.IP)
	}
	if !ip.IsValid() {
		return
	}
	res := rules.Lookup(ip)
	if res.HasASN && in.ASN == "" {
		in.ASN = strconv.FormatUint(uint64(res.ASN), 10)
	}
	if !in.StaticSet[policy.PartIP] {
		in.Static[policy.PartIP], in.StaticSet[policy.PartIP] = res.IP, true
	}
	if !in.StaticSet[policy.PartASN] {
		in.Static[policy.PartASN], in.StaticSet[policy.PartASN] = res.ASNMult, true
	}
}

// request resets d's store request for in: no limits, subjects or locks
// yet, the cost and the time.
func (e *Engine) request(d *Decision, in *Input, verifiedDevice bool, start time.Time) *bucket.Request {
	req := &d.breq
	req.Limits, req.Subjects, req.Locks, req.TrustKeys = req.Limits[:0], req.Subjects[:0], req.Locks[:0], req.TrustKeys[:0]
	req.Device, req.OwnTrust, req.Lease = "", "", ""
	if verifiedDevice {
		// only a proven device can be in an account's trusted devices
		req.Device = in.DeviceID
	}
	req.Cost, req.Now = in.Cost, in.Now
	if req.Now.IsZero() && e.localClock {
		req.Now = start
	}
	return req
}

// appendLimits appends to d's request every limit of the class ci that
// applies to in, with its bucket key and its subjects' multiplier keys
// (each subject once), keys built into one buffer (d.keybuf, d.spans).
func (e *Engine) appendLimits(p *policy.Policy, ci int, in *Input, d *Decision, routeVal string, verified float64, verifiedDevice bool) {
	req := &d.breq
	bk := e.bucketKeysOf(p)
	var subjOf [8]int8 // key part -> subject index + 1
	var claimOf int8   // the claim subject's index + 1 (claims.go)
	claim := in.DeviceID != "" && !verifiedDevice
	var attrs attrSubjects
	for _, l := range p.Applicable(ci, in.UserID != "") {
		if len(d.applied) == bucket.MaxLimits {
			break
		}
		var mask uint32
		applies := len(l.IfAttr) == 0 || l.AttrsMatch(in.Attributes)
		for i, part := range l.By {
			if !applies {
				break
			}
			v := partValue(in, l, i, routeVal)
			if part != policy.PartGlobal && v == "" {
				applies = false
			}
		}
		if !applies {
			continue
		}
		d.keybuf = e.appendBucketKey(d.keybuf, bk, l, in, routeVal, claim)
		d.spans = append(d.spans, span{len(d.keybuf), spanBucket})
		if l.TrustedOwn && verifiedDevice && in.Account != "" {
			d.appendOwnKey(e.o.Prefix, in)
		}
		for _, part := range l.By {
			if !part.IsSubject() {
				continue
			}
			if subjOf[part] == 0 {
				d.keybuf = e.multKeys[part].Append(d.keybuf, value(in, part, routeVal))
				d.spans = append(d.spans, span{len(d.keybuf), spanSubject})
				static := 1.0
				if in.StaticSet[part] {
					static = in.Static[part]
				}
				if part == policy.PartDevice && verified != 1 {
					static = bucket.Combine(static, verified)
				}
				unverified := 1.0
				if part == policy.PartDevice && in.UnverifiedSet {
					unverified = in.Unverified
				}
				req.Subjects = append(req.Subjects, bucket.RequestSubject{})
				sub := &req.Subjects[len(req.Subjects)-1]
				sub.Static, sub.Unverified = static, unverified
				subjOf[part] = int8(len(req.Subjects))
			}
			mask |= 1 << uint(subjOf[part]-1)
			if part == policy.PartDevice && claim {
				mask |= 1 << uint(e.claimSubject(d, in, &claimOf)-1)
			}
		}
		if len(l.ByAttr) > 0 {
			mask |= e.attrMask(d, &attrs, l, in)
		}
		d.applied = append(d.applied, l)
		appendLimit(req, l, mask)
	}
}

// appendLimit appends l to req with the subjects in mask, field by field
// (a literal is built on the stack and copied: its wide loads wait on the
// narrow stores that built it).
func appendLimit(req *bucket.Request, l *policy.Limit, mask uint32) {
	req.Limits = append(req.Limits, bucket.Limit{})
	bl := &req.Limits[len(req.Limits)-1]
	bl.Burst, bl.Rate, bl.Period, bl.Shadow, bl.Subjects = l.Burst, l.Rate, l.Period, l.Shadow, mask
	if l.Kind != policy.KindBucket {
		bl.Kind, bl.Calendar, bl.LeaseTTL = bucket.Kind(l.Kind), bucket.Calendar(l.Calendar), l.LeaseTTL
		if l.Kind == policy.KindConcurrency && req.Lease == "" && req.Cost > 0 {
			req.Lease = newLease()
		}
	}
}

// handOutKeys cuts the keys out of one string of d.keybuf and hands them
// to req in the order they were appended. With borrow, that string is
// d.keybuf itself, valid until d's next decision: only for a store that
// keeps no key past Decide.
func handOutKeys(d *Decision, req *bucket.Request, borrow bool) {
	var keys string
	if borrow {
		keys = unsafe.String(unsafe.SliceData(d.keybuf), len(d.keybuf))
	} else {
		keys = string(d.keybuf)
	}
	from, li, si := 0, 0, 0
	for _, sp := range d.spans {
		k := keys[from:sp.end]
		from = sp.end
		switch sp.kind {
		case spanLock:
			req.Locks = append(req.Locks, k)
			req.TrustKeys = append(req.TrustKeys, "")
		case spanTrust:
			req.TrustKeys[len(req.TrustKeys)-1] = k
		case spanOwn:
			req.Limits[li-1].OwnKey = k
		case spanOwnTrust:
			req.OwnTrust = k
		case spanSubject:
			req.Subjects[si].Key = k
			si++
		default:
			req.Limits[li].Key = k
			li++
		}
	}
}

// decideStore answers from the L1 cache when it can, else asks the store
// (unless the breaker is open), applying the failure modes when the store
// fails, and records the decision.
func (e *Engine) decideStore(ctx context.Context, p *policy.Policy, ci int, d *Decision, req *bucket.Request, start time.Time) error {
	if e.o.L1 != nil && e.fromL1(p, ci, d, req, start) {
		e.record(d, p, start)
		return nil
	}
	if e.o.L1 != nil && !e.o.L1.noSubjects {
		e.subjectsFromL1(req, start)
	}
	if !e.o.Breaker.Allow() {
		e.fail(d, p, ci, bucket.ErrUnavailable, start)
		e.record(d, p, start)
		return nil
	}
	err := e.o.Store.Decide(ctx, req, &d.bres)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// The caller went away (a client that disconnected, its own
		// deadline): no verdict on the store, so neither a store error nor
		// a failure for the breaker (a burst of disconnects would open it
		// for everyone else).
		e.o.Breaker.Abandon()
		e.fail(d, p, ci, err, start)
		d.abandoned = true
		e.record(d, p, start)
		return nil
	}
	e.o.Breaker.Done(err == nil || errors.Is(err, bucket.ErrBadRequest))
	if err != nil {
		if errors.Is(err, bucket.ErrBadRequest) {
			return fmt.Errorf("engine: %w", err)
		}
		if e.o.Metrics != nil {
			e.o.Metrics.StoreErrors.Inc()
		}
		e.fail(d, p, ci, err, start)
		e.record(d, p, start)
		return nil
	}
	e.conclude(d)
	if foreignLock(p, ci, d, req) {
		return e.decideStore(ctx, p, ci, d, req, start)
	}
	d.lease = e.leaseID(d)
	if e.o.L1 != nil {
		e.toL1(d, req, start)
	}
	e.record(d, p, start)
	return nil
}

// routeOf matches endpoint ("METHOD /path", or "" for no route) to its
// class and route.
func routeOf(p *policy.Policy, endpoint string) (int, *policy.Route, error) {
	if endpoint == "" {
		return p.ClassIndex(policy.DefaultClass), nil, nil
	}
	method, path, ok := strings.Cut(endpoint, " ")
	if !ok {
		return 0, nil, fmt.Errorf("engine: endpoint %q is not \"METHOD /path\"", endpoint)
	}
	ci, route := p.Route(method, path)
	return ci, route, nil
}

// attestation returns the multiplier of the request's device subject for
// its proven attestation (1 when none) and whether the device is proven:
// a valid device token for DeviceID (6.3). An unproven device gets the
// policy's unverified_multiplier (set in in), whatever is stored for it.
func attestation(p *policy.Policy, in *Input) (verified float64, proven bool) {
	proven = in.DeviceVerified && in.DeviceID != ""
	a := p.Risk.Attestation
	switch {
	case a == nil:
		return 1, proven
	case proven:
		in.UnverifiedSet = false
		return a.VerifiedMultiplier, true
	case a.UnverifiedSet && !in.UnverifiedSet:
		in.Unverified, in.UnverifiedSet = a.UnverifiedMultiplier, true
	}
	return 1, false
}

// fromL1 answers d from the L1 cache when a lock or an empty bucket of
// this request is known; it reports whether it did.
func (e *Engine) fromL1(p *policy.Policy, ci int, d *Decision, req *bucket.Request, now time.Time) bool {
	c := e.o.L1
	if !c.denials(now) {
		return false
	}
	for i, k := range req.Locks {
		if req.Device != "" && i < len(req.TrustKeys) && req.TrustKeys[i] != "" {
			// A proven device may be in this lock's trust set: only the
			// store knows, so a cached lock never answers for it (it
			// would deny a request the store exempts).
			continue
		}
		if en, ok := c.get(k, now); ok && p.LockApplies(en.lock.Rule, ci) {
			d.Outcome, d.Lock, d.LockScope, d.Now = Locked, en.lock, en.scope, now
			if en.lock.Kind == "step_up" {
				d.Outcome = StepUp
			}
			d.RetryAfter = en.lock.Until.Sub(now)
			d.fromL1 = true
			return true
		}
	}
	var longest time.Duration
	bi := -1
	var hit l1Entry
	for i := range req.Limits {
		if req.Limits[i].Shadow || req.Limits[i].OwnKey != "" {
			// a limit with an own bucket: only the store knows which
			// bucket this request takes from (7.1)
			continue
		}
		en, ok := c.get(req.Limits[i].Key, now)
		if !ok || req.Cost < en.cost {
			continue
		}
		if w := en.until.Sub(now); w > longest || bi < 0 {
			longest, bi, hit = w, i, en
		}
	}
	if bi < 0 {
		return false
	}
	d.Outcome, d.Now, d.RetryAfter = Limited, now, longest
	d.Binding = d.applied[bi]
	d.Limit = int64(hit.burst + 1e-9)
	d.Remaining = 0
	d.Reset = hit.reset
	d.Window = windowOf(d.Binding, now)
	d.fromL1 = true
	return true
}

// subjectsFromL1 marks the subjects whose multipliers the L1 cache knows,
// so the store does not read them.
func (e *Engine) subjectsFromL1(req *bucket.Request, now time.Time) {
	c := e.o.L1
	ns := monoNS(now)
	for j := range req.Subjects {
		sub := &req.Subjects[j]
		en, ok := c.getSubject(sub.Key, ns)
		if ok && en.static == sub.Static && en.unverified == sub.Unverified {
			sub.Cached, sub.Mult, sub.Pen = true, en.mult, en.pen
		}
	}
}

// toL1 remembers a store answer that will hold: empty buckets until their
// retry time, locks and subjects' multipliers for the TTL.
func (e *Engine) toL1(d *Decision, req *bucket.Request, now time.Time) {
	c := e.o.L1
	for j, sr := range d.bres.Subjects {
		if sr.Read && j < len(req.Subjects) && !c.noSubjects {
			sub := &req.Subjects[j]
			c.putSubject(sub.Key, l1Subject{until: monoNS(now) + int64(c.ttl), mult: sr.Mult, pen: sr.Pen, static: sub.Static, unverified: sub.Unverified}, monoNS(now))
		}
	}
	switch d.Outcome {
	case Locked, StepUp:
		until := now.Add(min(c.ttl, d.RetryAfter))
		c.put(req.Locks[d.bres.LockIndex], l1Entry{until: until, lock: d.Lock, scope: d.LockScope}, now)
	case Limited:
		for i := range req.Limits {
			lr := &d.bres.Limits[i]
			if req.Limits[i].Shadow || lr.Allowed || lr.RetryAfter <= 0 || d.bres.Trusted && req.Limits[i].OwnKey != "" ||
				req.Limits[i].Kind == bucket.KindConcurrency {
				continue
			}
			// Local time plus the store's wait: the store's clock (Redis
			// TIME) and ours differ only by the round trip.
			c.put(req.Limits[i].Key, l1Entry{until: now.Add(min(c.ttl, lr.RetryAfter)), cost: req.Cost, burst: lr.Burst, reset: lr.Reset}, now)
		}
	}
}

// ListMatch returns the list that decides a request like in, as Decide
// would: the first deny list it is on (deny true), else the first allow
// list, else nil. It makes no store call. It fills in.ASN from the
// reputation rules when unset (reports carry no ASN).
func (e *Engine) ListMatch(in *Input) (l *policy.List, deny bool) {
	p := e.o.Policy()
	if !p.HasLists() {
		return nil, false
	}
	addr := in.Addr
	if !addr.IsValid() {
		addr, _ = netip.ParseAddr(in.IP)
	}
	if in.ASN == "" && addr.IsValid() && e.o.Reputation != nil {
		if rules := e.o.Reputation(); rules != nil {
			if res := rules.Lookup(addr); res.HasASN {
				in.ASN = strconv.FormatUint(uint64(res.ASN), 10)
			}
		}
	}
	var d Decision
	if !e.listed(p, in, &d) {
		return nil, false
	}
	return d.List, d.Outcome == DeniedList
}

// listed decides d by the policy's lists when the request is on one; it
// reports whether it did.
func (e *Engine) listed(p *policy.Policy, in *Input, d *Decision) bool {
	q := policy.ListQuery{Addr: in.Addr, ASN: in.ASN, UserID: in.UserID, DeviceID: in.DeviceID,
		DeviceProven: in.DeviceVerified && in.DeviceID != "", Account: in.Account, Attributes: in.Attributes}
	if !q.Addr.IsValid() {
		q.Addr, _ = netip.ParseAddr(in.IP)
	}
	l, deny := p.MatchLists(&q)
	if l == nil {
		return false
	}
	d.List = l
	d.Outcome = AllowedList
	if deny {
		d.Outcome = DeniedList
	}
	return true
}

// partValue returns the request's value of l's i-th key part ("" when
// absent).
func partValue(in *Input, l *policy.Limit, i int, route string) string {
	if l.By[i] == policy.PartAttr {
		return l.AttrValue(i, in.Attributes)
	}
	return value(in, l.By[i], route)
}

// value returns the request's value of a key part ("" when absent).
func value(in *Input, part policy.KeyPart, route string) string {
	switch part {
	case policy.PartIP:
		if in.ipKey != "" {
			return in.ipKey // the IPv6 prefix (7.1)
		}
		return in.IP
	case policy.PartUser:
		return in.UserID
	case policy.PartDevice:
		return in.DeviceID
	case policy.PartAccount:
		return in.Account
	case policy.PartASN:
		return in.ASN
	case policy.PartRoute:
		return route
	}
	return ""
}

// tagPart returns the index of the key part that tags l's bucket keys:
// its first subject, or its first part.
func tagPart(l *policy.Limit) int {
	for i, part := range l.By {
		if part.IsSubject() {
			return i
		}
	}
	return 0
}

// appendBucketKey appends a limit's bucket key: the hash tag of its first
// subject (or of its first part), ":b:", the limit name, then "|" and each
// further part's escaped value. bk holds the templates of l's policy.
func (e *Engine) appendBucketKey(dst []byte, bk *bucketKeys, l *policy.Limit, in *Input, route string, claim bool) []byte {
	first := tagPart(l)
	switch tag := l.By[first]; {
	case claim && tag == policy.PartDevice:
		dst = appendClaimTag(dst, e.o.Prefix, l, in.DeviceID)
	case tag == policy.PartAttr:
		dst = bucket.AppendAttrTag(dst, e.o.Prefix, l.ByAttr[first], l.AttrValue(first, in.Attributes))
		dst = bucket.AppendBucketName(dst, l.Name)
	case l.Index < len(bk.keys) && &bk.p.Limits[l.Index] == l:
		dst = bk.keys[l.Index].Append(dst, value(in, tag, route)) // "" for global
	default: // a limit of no policy in bk: the same bytes, built in full
		dst = bucket.AppendSubjectTag(dst, e.o.Prefix, tag.String(), value(in, tag, route))
		dst = bucket.AppendBucketName(dst, l.Name)
	}
	for i, part := range l.By {
		if i == first || part == policy.PartGlobal {
			continue
		}
		if claim && part == policy.PartDevice {
			dst = bucket.AppendClaimPart(dst, in.DeviceID)
			continue
		}
		dst = bucket.AppendKeyPart(dst, partValue(in, l, i, route))
	}
	return dst
}

// conclude picks the outcome and binding limit from the store's result.
func (e *Engine) conclude(d *Decision) {
	r := &d.bres
	d.Now = r.Now
	if r.Locked {
		d.Lock = r.Lock
		if r.LockIndex >= 0 && r.LockIndex < len(d.breq.Locks) {
			d.LockScope = lockScope(e.o.Prefix, d.breq.Locks[r.LockIndex])
		}
		d.RetryAfter = r.Lock.Until.Sub(r.Now)
		if r.Lock.Kind == "step_up" {
			d.Outcome = StepUp
		} else {
			d.Outcome = Locked
		}
		return
	}
	bi := -1
	if r.Allowed {
		d.Outcome = Allowed
		best := math.Inf(1)
		for i, l := range d.applied {
			if l.Shadow {
				continue
			}
			lr := &r.Limits[i]
			ratio := 0.0
			if lr.Burst > 0 {
				ratio = lr.Remaining / lr.Burst
			}
			if ratio < best {
				best, bi = ratio, i
			}
		}
	} else {
		d.Outcome = Limited
		var longest time.Duration = -1
		for i, l := range d.applied {
			lr := &r.Limits[i]
			if l.Shadow || lr.Allowed {
				continue
			}
			if lr.RetryAfter > longest {
				longest, bi = lr.RetryAfter, i
			}
		}
		d.RetryAfter = longest
	}
	if bi < 0 {
		return
	}
	lr := &r.Limits[bi]
	d.Binding = d.applied[bi]
	d.Limit = int64(math.Floor(lr.Burst + 1e-9))
	d.Remaining = int64(math.Floor(lr.Remaining + 1e-9))
	d.Reset = lr.Reset
	d.Window = windowOf(d.Binding, d.Now)
}

// fail applies the failure mode of the applicable limits to a store error.
func (e *Engine) fail(d *Decision, p *policy.Policy, ci int, err error, start time.Time) {
	d.Now, d.Err = start, err
	d.Outcome = Degraded
	for _, l := range d.applied {
		if !l.Shadow && p.FailureModeOf(l, ci) == policy.FailClosed {
			d.Outcome = Unavailable
			d.RetryAfter = e.o.UnavailableRetry
			break
		}
	}
	// Degraded answers carry the nominal numbers of the tightest limit.
	for _, l := range d.applied {
		if l.Shadow {
			continue
		}
		if d.Binding == nil || l.Burst < d.Binding.Burst {
			d.Binding = l
		}
	}
	if d.Binding != nil {
		d.Limit = int64(d.Binding.Burst)
		d.Remaining = d.Limit
		d.Reset = start
		d.Window = windowOf(d.Binding, start)
	}
}

// record updates the metrics for d.
func (e *Engine) record(d *Decision, p *policy.Policy, start time.Time) {
	m := e.o.Metrics
	if m == nil {
		return
	}
	m.Seconds.Observe(e.o.Clock().Sub(start).Seconds())
	if d.fromL1 {
		m.L1Hits.Inc()
	}
	switch d.Outcome {
	case Locked, StepUp:
		m.Decisions.WithLabelValues(d.Lock.Rule, d.Class, d.Outcome.String()).Inc()
		return
	case AllowedList, DeniedList:
		m.Decisions.WithLabelValues(d.List.Name, d.Class, d.Outcome.String()).Inc()
		return
	case Unavailable, Degraded:
		result := d.Outcome.String()
		if d.abandoned {
			result = ResultAbandoned
		}
		for _, l := range d.applied {
			m.Decisions.WithLabelValues(l.Name, d.Class, result).Inc()
		}
		return
	}
	if len(d.applied) == 0 {
		m.Decisions.WithLabelValues("none", d.Class, ResultAllowed).Inc()
		return
	}
	if d.fromL1 {
		m.Decisions.WithLabelValues(d.Binding.Name, d.Class, ResultLimited).Inc()
		return
	}
	for i, l := range d.applied {
		lr := &d.bres.Limits[i]
		o := e.limitObs(p, l, d.Class)
		switch {
		case !lr.Allowed && l.Shadow:
			o.shadowLimited.Inc()
		case !lr.Allowed:
			o.limited.Inc()
		default:
			o.allowed.Inc()
			if o.leased != nil && d.lease != "" {
				o.leased.Inc()
			}
		}
		if !l.Shadow && lr.Burst > 0 {
			o.remaining.Observe(lr.Remaining / lr.Burst)
		}
	}
}
