package bucket

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"
)

// DefaultPrefix starts every key of a store whose options name no prefix,
// and every Redis key of daemons given no --key-prefix (the engine and the
// risk daemon default to it too).
const DefaultPrefix = "tg:"

// Subject names what multipliers, locks and trust sets attach to: a kind
// ("ip", "user", "device", "account", "asn", or "attr:NAME" for the value
// of an attribute) and an identifier in the form
// the check API keys it. The store builds the subject's keys (see the
// package doc's layout); callers never do.
type Subject struct {
	// Kind is the subject's kind: lowercase letters only.
	Kind string
	// ID is the identifier; any bytes (EscapeID keeps them inside the
	// key's hash tag).
	ID string
}

// check rejects a kind that could break out of a key's hash tag: a kind
// is lowercase letters, or "attr:" and an attribute name of a-z 0-9 _
// (7.4: attribute subjects carry multipliers).
func (s Subject) check() error {
	if s.Kind == "" {
		return errors.Join(ErrBadRequest, errors.New("bucket: subject kind is empty"))
	}
	kind, attr := s.Kind, false
	if name, ok := strings.CutPrefix(kind, "attr:"); ok && name != "" {
		kind, attr = name, true
	}
	for i := 0; i < len(kind); i++ {
		if c := kind[i]; (c < 'a' || c > 'z') && !(attr && ('0' <= c && c <= '9' || c == '_')) {
			return errors.Join(ErrBadRequest, errors.New("bucket: subject kind "+strconv.Quote(s.Kind)+" is not lowercase letters"))
		}
	}
	return nil
}

// Admin is the subject-level administration both stores implement: the
// admin API, riskd and `limiter replay` write through it, and the L1
// cache decorates it (engine.L1.Wrap). Expiry is judged by the store's
// own clock: Redis TIME for RedisStore, the injected clock for
// MemoryStore.
type Admin interface {
	// SetMultiplier sets (replaces) the multiplier of m.Source on s.
	SetMultiplier(ctx context.Context, s Subject, m Multiplier) error
	// ClearMultiplier removes the multiplier of source on s; source ""
	// removes all of them.
	ClearMultiplier(ctx context.Context, s Subject, source string) error
	// Multipliers lists the unexpired multipliers of s, sorted by source.
	Multipliers(ctx context.Context, s Subject) ([]Multiplier, error)
	// SetLock locks s (a lockout or step-up) until l.Until, replacing the
	// lock at l's key: the subject's lock key, or l.Rule's own when l.Own.
	SetLock(ctx context.Context, s Subject, l Lock) error
	// ClearLock lifts every lock of s (its lock key and each rule's own);
	// it reports whether one was in force.
	ClearLock(ctx context.Context, s Subject) (bool, error)
	// ClearRuleLock lifts only the lock rule keeps apart on s (Lock.Own),
	// or with rule "" only the lock at the subject's lock key; it reports
	// whether it was in force.
	ClearRuleLock(ctx context.Context, s Subject, rule string) (bool, error)
	// GetLock returns the lock of s in force that lasts longest (of its
	// lock key and each rule's own), if one is.
	GetLock(ctx context.Context, s Subject) (Lock, bool, error)
	// Locks returns every lock of s in force, the longest lasting first
	// (then by rule).
	Locks(ctx context.Context, s Subject) ([]Lock, error)
	// Trust adds device to the trust set of s until the given time: an
	// Exempt lock of s spares it.
	Trust(ctx context.Context, s Subject, device string, until time.Time) error
	// TrustAdmin lists and revokes trusted devices.
	TrustAdmin
	// ListLocks lists the locks in force, newest first, at most limit.
	ListLocks(ctx context.Context, limit int) ([]LockEntry, error)
	// ListMultipliers lists the stored multipliers in force, newest
	// first, at most limit.
	ListMultipliers(ctx context.Context, limit int) ([]MultiplierEntry, error)
	// Now reads the store's clock, the one it judges expiry by: Redis
	// TIME for a RedisStore, the injected clock for a MemoryStore. An
	// expiry computed for a write (now + a TTL) starts from it.
	Now(ctx context.Context) (time.Time, error)
}

// Store is a bucket store: decisions plus administration, under one key
// prefix.
type Store interface {
	Decider
	Admin
	Releaser
	// Prefix returns the prefix that starts every key of the store.
	Prefix() string
}

// appendKey appends prefix + "{kind:escaped-id}" + suffix to dst.
func appendKey(dst []byte, prefix, kind, id, suffix string) []byte {
	return append(AppendSubjectTag(dst, prefix, kind, id), suffix...)
}

// AppendMultiplierKey appends the key of a subject's multiplier hash
// (prefix + "{kind:id}:m") to dst, for callers that build a decision's
// keys in one buffer.
func AppendMultiplierKey(dst []byte, prefix, kind, id string) []byte {
	return appendKey(dst, prefix, kind, id, ":m")
}

// AppendLockKey appends the key of a subject's lock (prefix + "{kind:id}:l").
func AppendLockKey(dst []byte, prefix, kind, id string) []byte {
	return appendKey(dst, prefix, kind, id, ":l")
}

// AppendRuleLockKey appends the key of the lock a class-restricted
// velocity rule keeps apart on a subject (prefix + "{kind:id}:l:" + the
// escaped rule name; Lock.Own). It shares the subject's hash tag, so a
// Cluster keeps every lock of a subject in one slot.
func AppendRuleLockKey(dst []byte, prefix, kind, id, rule string) []byte {
	dst = appendKey(dst, prefix, kind, id, ruleLockInfix)
	return AppendEscapedID(dst, rule)
}

// ruleLockInfix follows a subject's hash tag in the key of a rule's own
// lock; lockRulesSuffix names the set of the rules that keep one.
const (
	ruleLockInfix   = ":l:"
	lockRulesSuffix = ":lr"
)

// AppendTrustKey appends the key of a subject's trust set
// (prefix + "{kind:id}:t").
func AppendTrustKey(dst []byte, prefix, kind, id string) []byte {
	return appendKey(dst, prefix, kind, id, ":t")
}

// AppendBucketName appends ":b:" and a limit's name to a bucket key's
// hash tag (AppendSubjectTag or AppendAttrTag); further key parts follow
// with AppendKeyPart.
func AppendBucketName(dst []byte, name string) []byte {
	dst = append(dst, ":b:"...)
	return append(dst, name...)
}

// summarySuffix follows a multiplier hash's key to name its summary, the
// string decide.lua reads instead of the hash (see summarizeLua).
const summarySuffix = "s"

// KeyTemplate builds one kind of key under one prefix, for any id: the
// bytes AppendSubjectTag and the suffix after it (a bucket's name, a
// multiplier hash's ":m") would append, with the constant parts joined
// once, so that the hot path copies three pieces per key instead of six.
// The zero KeyTemplate is not usable; it is safe for concurrent use.
type KeyTemplate struct {
	head, tail string // prefix + "{subject:", "}" + suffix
	empty      string // the whole key of id ""
}

// NewBucketKeyTemplate returns the template of a limit's bucket keys
// tagged by subject: Append(dst, id) appends what AppendSubjectTag(dst,
// prefix, subject, id) and then AppendBucketName(name) would.
func NewBucketKeyTemplate(prefix, subject, name string) KeyTemplate {
	return newKeyTemplate(prefix, subject, string(AppendBucketName(nil, name)))
}

// NewMultiplierKeyTemplate returns the template of a kind's multiplier
// keys: Append(dst, id) appends what AppendMultiplierKey(dst, prefix,
// kind, id) would.
func NewMultiplierKeyTemplate(prefix, kind string) KeyTemplate {
	return newKeyTemplate(prefix, kind, ":m")
}

func newKeyTemplate(prefix, subject, suffix string) KeyTemplate {
	return KeyTemplate{
		head:  prefix + "{" + subject + ":",
		tail:  "}" + suffix,
		empty: string(AppendSubjectTag(nil, prefix, subject, "")) + suffix,
	}
}

// Append appends the key of id to dst.
func (t *KeyTemplate) Append(dst []byte, id string) []byte {
	if id == "" {
		return append(dst, t.empty...)
	}
	dst = append(dst, t.head...)
	dst = AppendEscapedID(dst, id)
	return append(dst, t.tail...)
}

func subjectKey(prefix string, s Subject, suffix string) string {
	return string(appendKey(make([]byte, 0, len(prefix)+len(s.Kind)+len(s.ID)+8), prefix, s.Kind, s.ID, suffix))
}

// MultiplierKey returns the key of a subject's multiplier hash.
func MultiplierKey(prefix, kind, id string) string {
	return subjectKey(prefix, Subject{kind, id}, ":m")
}

// TrustKey returns the key of a subject's trust set: the devices that
// attested and logged in to the account, exempt from its lockouts.
func TrustKey(prefix, kind, id string) string { return subjectKey(prefix, Subject{kind, id}, ":t") }

// LockKey returns the key of a subject's lock (accounts and IPs are locked).
func LockKey(prefix, kind, id string) string { return subjectKey(prefix, Subject{kind, id}, ":l") }

// RuleLockKey returns the key of the lock rule keeps apart on a subject
// (AppendRuleLockKey).
func RuleLockKey(prefix, kind, id, rule string) string {
	return string(AppendRuleLockKey(nil, prefix, kind, id, rule))
}

// lockKeyOf returns the key l is kept under on s: its rule's own key when
// l.Own, else the subject's lock key.
func lockKeyOf(prefix string, s Subject, l Lock) string {
	if l.Own {
		return RuleLockKey(prefix, s.Kind, s.ID, l.Rule)
	}
	return subjectKey(prefix, s, ":l")
}

// isRuleLockKey reports whether key is a rule's own lock key
// (RuleLockKey), not a subject's lock key.
func isRuleLockKey(key string) bool {
	j := strings.LastIndexByte(key, '}')
	return j >= 0 && strings.HasPrefix(key[j+1:], ruleLockInfix)
}

// OffendersKey returns the key of riskd's offender list (JSON), which the
// limiters serve at GET /v1/admin/offenders.
func OffendersKey(prefix string) string { return prefix + "offenders" }

// StoreEpochKey returns the key by which riskd (consumer durable) notices
// that Redis lost its data and re-asserts its measures.
func StoreEpochKey(prefix, durable string) string {
	return prefix + "riskd:" + durable + ":store-epoch"
}

// LeaderKey returns the key of riskd's leader lease (consumer durable).
func LeaderKey(prefix, durable string) string { return prefix + "riskd:" + durable + ":leader" }

// AttestationKey returns the key of a device's attestation status.
func AttestationKey(prefix, device string) string {
	return prefix + "{device:" + EscapeID(device) + "}:att"
}

// ChallengeKey returns the key of one attestation challenge issued to a
// device (in the device's slot).
func ChallengeKey(prefix, device, challenge string) string {
	return prefix + "{device:" + EscapeID(device) + "}:ch:" + challenge
}

// ChallengeUsedKey returns the key that marks a signed attestation
// challenge used, by its nonce (in the device's slot).
func ChallengeUsedKey(prefix, device, nonce string) string {
	return prefix + "{device:" + EscapeID(device) + "}:chu:" + nonce
}

// ChallengeSecretKey returns the key of the secret every replica signs
// attestation challenges with.
func ChallengeSecretKey(prefix string) string { return prefix + "attest:challenge-key" }

// Listing indexes: sorted sets of lock keys and of "multiplier key|source",
// scored by when they were set (Unix ms).
func lockIndex(prefix string) string { return prefix + "index:locks" }
func multIndex(prefix string) string { return prefix + "index:multipliers" }

// AppendOwnPart appends to a bucket key the part that makes it the bucket
// of one trusted device (Limit.OwnKey, 7.1): "|~" and the escaped device
// id. A limit's other keys carry one part fewer, so no key of the limit
// can be the device's.
func AppendOwnPart(dst []byte, device string) []byte {
	dst = append(dst, "|~"...)
	return AppendEscapedID(dst, device)
}

// ClaimKind is the subject kind of a device id that a request names
// without its device token (7.1): its multipliers and buckets are kept
// apart from the device's own ("{claim:id}" beside "{device:id}"), so
// that what claims do never lowers or spends the proven device's budget.
const ClaimKind = "claim"

// LockKinds are the subject kinds whose locks a lockout of subject is
// kept under, and so what a lift of it clears: a device's are its own and
// its claim's (the limiter answers both with scope "device"). The admin
// API, riskd and replay lift through it.
func LockKinds(subject string) []string {
	if subject == "device" {
		return []string{"device", ClaimKind}
	}
	return []string{subject}
}

// AppendClaimPart appends to a bucket key the part of a device id named
// without its token (a limit keyed by device after another subject):
// "|%!" and the escaped id. An escaped id never holds "%!" ('%' is
// escaped as "%25"), so no proven device's part can be a claim's.
func AppendClaimPart(dst []byte, device string) []byte {
	dst = append(dst, "|%!"...)
	return AppendEscapedID(dst, device)
}
