package bucket

import (
	"context"
	"errors"
	"math"
	"strconv"
	"time"
)

// MaxLimits is the most limits one decision may evaluate, and MaxSubjects
// the most subjects whose multipliers it may read.
const (
	MaxLimits   = 32
	MaxSubjects = 32
)

// Sentinel errors.
var (
	// ErrUnavailable wraps every failure to reach the store (connection
	// refused, timeout, circuit open). Callers apply their failure mode.
	ErrUnavailable = errors.New("bucket: store unavailable")
	// ErrBadRequest reports a decision request the store cannot evaluate
	// (too many limits, a subject index out of range, a negative cost).
	ErrBadRequest = errors.New("bucket: bad request")
	// ErrUnanswered, beside ErrUnavailable, reports a decision that
	// reached the store but whose answer never came back (a timeout, the
	// caller gone, a connection lost after the command was sent): the
	// store may have run it, or may still run it, and taken its tokens and
	// its concurrency slots. A decision that failed before it was sent
	// (its caller gone while it waited for a lane, a refused connection)
	// is ErrUnavailable alone.
	ErrUnanswered = errors.New("bucket: decision sent, answer lost")
)

// Limit is one limit of a decision: a token bucket, or what Kind says.
type Limit struct {
	// Key is the bucket's full key (see the package doc for the layout).
	Key string
	// Kind is what the limit counts (the zero value: a token bucket).
	Kind Kind
	// Burst is the capacity in tokens before multipliers (> 0): a
	// quota's count per period, a concurrency limit's slots.
	Burst float64
	// Rate is the number of tokens refilled per Period before multipliers
	// (> 0; buckets only).
	Rate float64
	// Period is the rate's period (> 0; buckets only).
	Period time.Duration
	// Calendar is a quota's period.
	Calendar Calendar
	// LeaseTTL is how long a concurrency limit's lease holds its slot
	// when it is not released.
	LeaseTTL time.Duration
	// Shadow marks a limit that never denies.
	Shadow bool
	// Subjects is a bit set of indexes into Request.Subjects whose effective
	// multipliers scale this limit (bit i set: Subjects[i] applies).
	Subjects uint32
	// OwnKey, when set, is the bucket of the request's device alone
	// (`trusted_devices: own`, 7.1): when Request.Device is in the trust
	// set Request.OwnTrust the decision takes from OwnKey, with this
	// limit's burst, rate and multipliers, instead of from Key.
	OwnKey string
	// Share, when > 0, lets Shares serve the limit from tokens taken
	// ahead of use, Share's worth at a time (see Shares). Stores ignore it.
	Share time.Duration
}

// RequestSubject is one subject whose multipliers a decision reads.
type RequestSubject struct {
	// Key is the subject's multiplier hash key (AppendMultiplierKey).
	Key string
	// Static is a multiplier the caller already knows for this subject
	// (reputation), combined with the stored ones by the same rule. 1 is
	// neutral; the zero value blocks, so set it.
	Static float64
	// Unverified joins the combination like Static (the policy's
	// unverified_multiplier for a device without a valid device token; the
	// caller decides, 6.3). Stored "attestation" multipliers are ignored.
	// 1 is neutral; set it.
	Unverified float64
	// Cached, when true, gives the subject's effective multiplier (Mult)
	// and penalty end (Pen, Unix µs; 0 when unknown) from the caller's L1
	// cache: the store does not read the subject's multipliers.
	Cached    bool
	Mult, Pen float64
}

// SubjectResult is what the store read for one subject.
type SubjectResult struct {
	// Read is true when the store read the subject's multipliers (it was
	// not Cached); Mult and Pen are then what a cache may keep.
	Read      bool
	Mult, Pen float64
}

// Request is one decision: every limit that applies to a request.
type Request struct {
	// Now is the decision time. The zero value means the store's own clock:
	// Redis TIME for RedisStore, the injected clock for MemoryStore.
	Now time.Time
	// Cost is the number of tokens the request takes from each bucket (>= 0).
	Cost float64
	// Limits are the buckets, at most MaxLimits.
	Limits []Limit
	// Subjects are the multiplier subjects, at most MaxSubjects.
	Subjects []RequestSubject
	// Locks are lock keys (AppendLockKey) checked before any bucket: an unexpired
	// lock denies the request and takes no token.
	Locks []string
	// TrustKeys, parallel to Locks, name each lock's trust set (AppendTrustKey;
	// "" for none): a lock marked Exempt does not apply to a Device in it.
	TrustKeys []string
	// Device is the request's device id, for trust sets.
	Device string
	// OwnTrust is the trust set (AppendTrustKey) that decides whether the
	// limits with an OwnKey take from it: they do when Device is in it.
	// "" (or no Device) means every limit takes from its Key.
	OwnTrust string
	// Lease is the lease id (LeaseLen lowercase hex digits, random: it is
	// what a release must name) that a decision taking from a concurrency
	// limit adds to its set. Required when Cost > 0 and a limit is a
	// concurrency limit.
	Lease string
}

// LimitResult is the outcome of one limit of a decision.
type LimitResult struct {
	// Allowed reports whether this limit had Cost tokens.
	Allowed bool
	// Remaining is the tokens left after the decision (fractional).
	Remaining float64
	// Burst is the effective capacity: Limit.Burst times Multiplier.
	Burst float64
	// Multiplier is the product of the effective multipliers of the limit's subjects.
	Multiplier float64
	// Reset is when the bucket will be full again.
	Reset time.Time
	// RetryAfter is how long until Cost tokens are available; 0 when Allowed.
	RetryAfter time.Duration
}

// Lock is an active lockout or step-up requirement.
type Lock struct {
	// Kind is "lockout" or "step_up".
	Kind string
	// Rule names the velocity rule (or "admin") that set it.
	Rule string
	// Until is when it ends.
	Until time.Time
	// Exempt makes the lock skip devices in the subject's trust set
	// (velocity rules with exempt_attested).
	Exempt bool
	// Own keeps the lock under a key of its rule's own (RuleLockKey:
	// "{kind:id}:l:RULE") instead of the subject's lock key (LockKey):
	// the locks of velocity rules restricted to route classes, so that one
	// class's lock never replaces another's. A lock read from a rule's key
	// has Own set.
	Own bool
}

// Result is the outcome of a decision.
type Result struct {
	// Allowed is true when the request was admitted (no lock, every
	// non-shadow limit had Cost tokens).
	Allowed bool
	// Locked is true when a lock denied the request; Lock describes it and
	// Limits is empty.
	Locked bool
	Lock   Lock
	// LockIndex is the index in Request.Locks of the lock in force.
	LockIndex int
	// Now is the decision time the store used.
	Now time.Time
	// Limits holds one result per Request.Limits, in order.
	Limits []LimitResult
	// Subjects holds one result per Request.Subjects (empty when Locked).
	Subjects []SubjectResult
	// Trusted reports that Device was in Request.OwnTrust: every limit
	// with an OwnKey took from its OwnKey.
	Trusted bool
}

// Multiplier is one source's multiplier on a subject.
type Multiplier struct {
	// Source is where it comes from: admin, velocity, anomaly, reputation, attestation.
	Source string
	// Value scales burst and refill (>= 0; 0 blocks).
	Value float64
	// ExpiresAt is when it ends; the zero value means never.
	ExpiresAt time.Time
	// Reason is free text for operators.
	Reason string
}

// Decider evaluates decisions. Implementations are safe for concurrent use.
type Decider interface {
	// Decide evaluates req and fills res (reusing res.Limits' storage).
	Decide(ctx context.Context, req *Request, res *Result) error
}

// Combine returns the effective multiplier of values by the penalty rule:
// if any value is below 1 the lowest applies, otherwise the highest; no
// value means 1.
func Combine(values ...float64) float64 {
	if len(values) == 0 {
		return 1
	}
	lo, hi := values[0], values[0]
	for _, v := range values[1:] {
		lo = math.Min(lo, v)
		hi = math.Max(hi, v)
	}
	if lo < 1 {
		return lo
	}
	return hi
}

// Effective returns the effective multiplier of ms at now (expired ones ignored).
func Effective(ms []Multiplier, now time.Time) float64 {
	lo, hi := 1.0, 1.0
	for _, m := range ms {
		if !m.ExpiresAt.IsZero() && !m.ExpiresAt.After(now) {
			continue
		}
		lo = math.Min(lo, m.Value)
		hi = math.Max(hi, m.Value)
	}
	if lo < 1 {
		return lo
	}
	return hi
}

// validate checks the request's shape.
func (r *Request) validate() error {
	if len(r.Limits) > MaxLimits {
		return errors.Join(ErrBadRequest, errors.New("bucket: "+strconv.Itoa(len(r.Limits))+" limits, at most 32"))
	}
	if len(r.TrustKeys) != 0 && len(r.TrustKeys) != len(r.Locks) {
		return errors.Join(ErrBadRequest, errors.New("bucket: trust keys must match locks one for one"))
	}
	if len(r.Subjects) > MaxSubjects {
		return errors.Join(ErrBadRequest, errors.New("bucket: "+strconv.Itoa(len(r.Subjects))+" subjects, at most 32"))
	}
	if !(r.Cost >= 0) || math.IsInf(r.Cost, 0) {
		return errors.Join(ErrBadRequest, errors.New("bucket: cost must be a finite number >= 0"))
	}
	if r.Cost > 0 && r.hasConcurrency() && !validLease(r.Lease) {
		return errors.Join(ErrBadRequest, ErrBadLease)
	}
	for i := range r.Limits {
		l := &r.Limits[i]
		if l.Kind != KindBucket {
			if err := l.validateKind(); err != nil {
				return errors.Join(ErrBadRequest, err)
			}
		} else if !(l.Burst > 0) || !(l.Rate > 0) || l.Period <= 0 || math.IsInf(l.Burst, 0) || math.IsInf(l.Rate, 0) {
			return errors.Join(ErrBadRequest, errors.New("bucket: limit "+strconv.Quote(l.Key)+" needs burst, rate and period > 0"))
		}
		if l.OwnKey != "" && (r.OwnTrust == "" || l.Kind != KindBucket) {
			// a lease must be released from the key it was taken on, which
			// only the store knows: own keys are for token buckets
			return errors.Join(ErrBadRequest, errors.New("bucket: limit "+strconv.Quote(l.Key)+" has an own key but is no token bucket or the request has no trust set"))
		}
		if len(r.Subjects) < 32 && l.Subjects>>uint(len(r.Subjects)) != 0 {
			return errors.Join(ErrBadRequest, errors.New("bucket: limit "+strconv.Quote(l.Key)+" names a subject out of range"))
		}
	}
	for i := range r.Subjects {
		if s, u := r.Subjects[i].Static, r.Subjects[i].Unverified; !(s >= 0) || math.IsInf(s, 0) || !(u >= 0) || math.IsInf(u, 0) {
			return errors.Join(ErrBadRequest, errors.New("bucket: subject "+strconv.Quote(r.Subjects[i].Key)+" has an invalid static multiplier"))
		}
	}
	return nil
}

// EscapeID makes an identifier safe inside a key's hash tag: it
// percent-encodes '{', '}', '%', ':' , '|', whitespace and control bytes.
// It returns id itself, without allocating, when nothing needs escaping.
func EscapeID(id string) string {
	for i := 0; i < len(id); i++ {
		if needsEscape(id[i]) {
			return string(AppendEscapedID(make([]byte, 0, len(id)+8), id))
		}
	}
	return id
}

// AppendEscapedID appends EscapeID(id) to dst without building the
// escaped string: the key builders escape every identity of every key.
func AppendEscapedID(dst []byte, id string) []byte {
	i := 0
	for ; i < len(id); i++ {
		if needsEscape(id[i]) {
			break
		}
	}
	dst = append(dst, id[:i]...)
	const hex = "0123456789ABCDEF"
	for ; i < len(id); i++ {
		c := id[i]
		if needsEscape(c) {
			dst = append(dst, '%', hex[c>>4], hex[c&15])
			continue
		}
		dst = append(dst, c)
	}
	return dst
}

func needsEscape(c byte) bool { return escapeTable[c] }

// escapeTable holds escapes for every byte: EscapeID runs for every
// identity of every bucket key, and a table look-up is cheaper than the
// comparisons.
var escapeTable = func() (t [256]bool) {
	for c := range t {
		t[c] = escapes(byte(c))
	}
	return t
}()

// escapes reports whether EscapeID escapes c.
func escapes(c byte) bool {
	return c <= ' ' || c == 0x7f || c == '{' || c == '}' || c == '%' || c == ':' || c == '|'
}

// AppendSubjectTag appends prefix + "{subject:escaped-id}" to dst.
func AppendSubjectTag(dst []byte, prefix, subject, id string) []byte {
	dst = append(dst, prefix...)
	dst = append(dst, '{')
	dst = append(dst, subject...)
	if id != "" || subject != "global" {
		dst = append(dst, ':')
		dst = AppendEscapedID(dst, id)
	}
	return append(dst, '}')
}

// AppendAttrTag appends prefix + "{attr:NAME:escaped-value}" to dst: the
// hash tag of a bucket whose limit is keyed by attributes and no subject
// (an attribute carries no multipliers). Attribute names are a-z 0-9 _,
// so the tag cannot be confused with a subject's.
func AppendAttrTag(dst []byte, prefix, name, value string) []byte {
	dst = append(dst, prefix...)
	dst = append(dst, "{attr:"...)
	dst = append(dst, name...)
	dst = append(dst, ':')
	dst = AppendEscapedID(dst, value)
	return append(dst, '}')
}

// AppendKeyPart appends a further key part's value to a bucket key:
// "|" and the escaped value.
func AppendKeyPart(dst []byte, value string) []byte {
	dst = append(dst, '|')
	return AppendEscapedID(dst, value)
}

// ErrFull reports that a MemoryStore holds as many subjects or locks as
// its bound allows and none has expired.
var ErrFull = errors.New("bucket: memory store full")
