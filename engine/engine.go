package engine

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/reputation"
)

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
	// Clock is the engine's time (default time.Now): decision latency,
	// the L1's expiries, the decision time handed to an in-process store,
	// the failure mode's answers and the local shares' lapses.
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
	// dec decides: the store, behind bucket.Shares when the store is
	// shared by several processes (the limits with local_share).
	dec bucket.Decider
	obs atomic.Pointer[obsCache]
	// multKeys are the multiplier key templates by subject key part;
	// bucketKeys those of the policy in force's bucket keys.
	multKeys   [len(subjectKinds)]bucket.KeyTemplate
	claimKeys  bucket.KeyTemplate // the claim subject's (claims.go)
	bucketKeys atomic.Pointer[bucketKeys]
	lockPlan   atomic.Pointer[lockPlan] // locks.go
	// giveBacks holds a token per give-back under way (lease.go).
	giveBacks chan struct{}
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
	e := &Engine{o: o, localClock: lc != nil && lc.LocalClock(), borrowKeys: mem && o.L1 == nil, dec: o.Store,
		giveBacks: make(chan struct{}, maxGiveBacks)}
	if !mem {
		// an in-process store has no hot key to spare: shares serve only
		// a store other processes share (Redis)
		e.dec = bucket.NewShares(o.Store, bucket.ShareOptions{Now: o.Clock})
	}
	for part, kind := range subjectKinds {
		if kind != "" {
			e.multKeys[part] = bucket.NewMultiplierKeyTemplate(o.Prefix, kind)
		}
	}
	e.claimKeys = bucket.NewMultiplierKeyTemplate(o.Prefix, ClaimSubject)
	return e, nil
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
	locks := !in.AttestationBudget && e.appendLocks(p, ci, in, d, verifiedDevice)
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
	bc, allowed := e.o.Breaker.Allow()
	if !allowed {
		e.fail(d, p, ci, bucket.ErrUnavailable, start)
		e.record(d, p, start)
		return nil
	}
	err := e.dec.Decide(ctx, req, &d.bres)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// The caller went away (a client that disconnected, its own
		// deadline): no verdict on the store, so neither a store error nor
		// a failure for the breaker (a burst of disconnects would open it
		// for everyone else).
		e.o.Breaker.Abandon(bc)
		e.giveBack(req, err)
		e.fail(d, p, ci, err, start)
		d.abandoned = true
		e.record(d, p, start)
		return nil
	}
	e.o.Breaker.Done(bc, err == nil || errors.Is(err, bucket.ErrBadRequest))
	if err != nil {
		if errors.Is(err, bucket.ErrBadRequest) {
			return fmt.Errorf("engine: %w", err)
		}
		if e.o.Metrics != nil {
			e.o.Metrics.StoreErrors.Inc()
		}
		e.giveBack(req, err)
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
