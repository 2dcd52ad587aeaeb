// Package bucket implements Tollgate's token buckets: one semantics, two stores.
//
// A bucket holds up to Burst tokens and refills at Rate tokens per Period.
// A decision evaluates every limit of one request together and is
// all-or-nothing: the request is allowed only if every non-shadow limit has
// Cost tokens, and a denied request takes no token from any bucket. Shadow
// limits are evaluated and reported but never deny; they take tokens only
// when they have them.
//
// Each limit's burst and refill are scaled by the product of the effective
// multipliers of its subjects (ip, user, device, account, asn). A subject's
// multipliers come from sources (admin, velocity, anomaly, reputation,
// attestation), each with its own expiry; penalties win: if any unexpired
// multiplier is below 1 the lowest applies, otherwise the highest (see
// Combine). A multiplier of 0 blocks.
//
// RedisStore evaluates decisions with one embedded Lua script (decide.lua),
// one round trip whatever the number of layers, on Redis's own clock (TIME),
// so several limiter hosts never disagree. Concurrent decisions share a
// round trip: a batch is one EVALSHA (on Redis Cluster, one EVALSHA per
// decision in one pipeline). MemoryStore is the same semantics
// in process for the one-process default. Both compute in float64 with the
// same operations in the same order, so they agree to the bit; the
// conformance tests in this package prove it on a shared table of steps.
//
// # Subjects and administration
//
// A Subject names what multipliers, locks and trust sets attach to: a kind
// (ip, user, device, account, asn) and an id. Both stores implement Admin,
// the subject-level operations (SetMultiplier, ClearMultiplier,
// Multipliers, SetLock, ClearLock, GetLock, Trust, ListLocks,
// ListMultipliers), and build every key themselves under the prefix of
// their options (RedisOptions.Prefix, MemoryOptions.Prefix): callers never
// build a key of a subject. The hot path, which builds a decision's keys in
// one buffer, uses this package's Append* builders (AppendMultiplierKey,
// AppendLockKey, AppendTrustKey, AppendSubjectTag, AppendAttrTag,
// AppendBucketName, AppendKeyPart); riskd's and attestation's other keys
// come from OffendersKey, StoreEpochKey, LeaderKey, AttestationKey and
// ChallengeKey. The limiter's L1 cache decorates a Store (engine.L1.Wrap)
// so that a write through it forgets the subject's cached entries.
//
// # One clock per store
//
// Every expiry a store judges is judged by one clock: RedisStore by Redis's
// TIME (decide.lua reads it once per batch; GetLock, ClearLock,
// Multipliers and the listings read it in the script or pipeline that
// reads the data, once per call; a Cluster decision reads it once with its
// locks and multipliers and hands it to every slot's script), never by the
// host's clock, which RedisStore reads only for its deadlines.
// MemoryStore judges by its injected clock (MemoryOptions.Now).
// Request.Now, when set, is the decision time in both. Admin.Now reads
// that clock for callers that compute an expiry (the admin API's ttl).
//
// # Key layout
//
// Every key starts with a configurable prefix (default "tg:") and carries a
// Redis Cluster hash tag naming its subject, so one subject's buckets,
// multipliers and lockout share a slot:
//
//	tg:{ip:198.51.100.7}:b:login-ip|POST /auth/login   bucket (16 bytes: tokens, last_us as little-endian float64s)
//	tg:{device:d_1}:m                                 multipliers (hash: source -> "value expires_us reason")
//	tg:{device:d_1}:ms                                their summary for decisions (value, expires_us pairs as little-endian float64s; written and expiring with the hash)
//	tg:{account:alice}:l                              lockout / step-up (string "kind until_us flags rule")
//	tg:{account:alice}:l:otp-flood                    the lock of a velocity rule restricted to classes, kept apart (Lock.Own)
//	tg:{account:alice}:lr                             the rules that keep a lock apart on the subject (set; expires with the last)
//	tg:{global}:b:global                              a bucket keyed by no subject
//	tg:{ip:198.51.100.7}:b:login-plan|free            a bucket keyed by [ip, attr:plan]
//	tg:{attr:tenant:acme}:b:tenant                    a bucket keyed by attributes alone
//
// A bucket whose limit is keyed by several subjects lives in the slot of the
// first subject of its `by` (else of its first part); further parts follow
// the limit's name, each as "|" and its escaped value, in `by` order. Identifiers are escaped (see EscapeID) so an id
// cannot break out of its hash tag. Buckets expire (PX) once they would be
// full again; multiplier hashes expire with their last entry.
package bucket
