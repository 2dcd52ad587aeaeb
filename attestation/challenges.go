package attestation

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/bucket"
)

// ChallengeTTL is how long an issued challenge can be used (once).
const ChallengeTTL = 5 * time.Minute

// challengeBytes is the challenge's entropy; its text is the unpadded
// base64url of these bytes (43 characters).
const (
	challengeBytes = 32
	challengeLen   = 43
)

// ErrUnavailable wraps every failure to reach a store (Redis down, a
// timeout). It is never an *Error: the app did nothing wrong.
var ErrUnavailable = errors.New("attestation: store unavailable")

// Challenges issues one-time challenges bound to a device id. A challenge
// is 32 random bytes as unpadded base64url and lasts ChallengeTTL;
// consuming it twice, for another device, or after it expired fails with
// an *Error of Step "challenge". Store failures wrap ErrUnavailable.
// Implementations are safe for concurrent use.
type Challenges interface {
	// Issue returns a new challenge for deviceID and when it expires.
	Issue(ctx context.Context, deviceID string, now time.Time) (challenge string, expires time.Time, err error)
	// Check reports whether challenge could be used for deviceID now,
	// without using it up: the handlers check it before verifying an
	// attestation, and use it up (Consume) only once that verified, so a
	// garbage attestation costs the store nothing.
	Check(ctx context.Context, deviceID, challenge string, now time.Time) error
	// Consume uses up challenge for deviceID.
	Consume(ctx context.Context, deviceID, challenge string, now time.Time) error
}

// errChallenge is the one answer for a challenge that cannot be used: the
// app learns no more than that.
func errChallenge() *Error {
	return fail(StepChallenge, "unknown, expired or already used for this device; request a new one")
}

// A signed challenge is the unpadded base64url of a 16-byte nonce, its
// expiry in Unix seconds (8 bytes, big-endian) and the first 16 bytes of
// HMAC-SHA256(secret, "tollgate challenge v1" 0 device id 0 nonce
// expiry): 40 bytes, 54 characters.
const (
	nonceBytes     = 16
	signedBytes    = nonceBytes + 8 + 16
	signedLen      = 54
	challengeLabel = "tollgate challenge v1"
)

// signChallenge returns a signed challenge of deviceID expiring at exp.
func signChallenge(secret []byte, deviceID string, exp time.Time, randRead func([]byte) (int, error)) (string, error) {
	var b [signedBytes]byte
	if _, err := randRead(b[:nonceBytes]); err != nil {
		return "", fmt.Errorf("attestation: challenge: %w", err)
	}
	binary.BigEndian.PutUint64(b[nonceBytes:], uint64(exp.Unix()))
	copy(b[nonceBytes+8:], challengeMAC(secret, deviceID, b[:nonceBytes+8]))
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// challengeMAC is the signature of a challenge's nonce and expiry (body)
// for deviceID.
func challengeMAC(secret []byte, deviceID string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(challengeLabel))
	m.Write([]byte{0})
	m.Write([]byte(deviceID))
	m.Write([]byte{0})
	m.Write(body)
	return m.Sum(nil)[:16]
}

// checkSigned checks a signed challenge of deviceID at now: its nonce
// (base64url) and ok when the signature holds and it has not expired;
// expired when the signature holds and it has.
func checkSigned(secret []byte, deviceID, challenge string, now time.Time) (nonce string, ok, expired bool) {
	if len(challenge) != signedLen {
		return "", false, false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(challenge) // one spelling: its last character's spare bits zero
	if err != nil || len(b) != signedBytes {
		return "", false, false
	}
	if !hmac.Equal(b[nonceBytes+8:], challengeMAC(secret, deviceID, b[:nonceBytes+8])) {
		return "", false, false
	}
	if exp := time.Unix(int64(binary.BigEndian.Uint64(b[nonceBytes:])), 0); !now.Before(exp) || exp.Sub(now) > ChallengeTTL+time.Second {
		return "", false, true
	}
	return base64.RawURLEncoding.EncodeToString(b[:nonceBytes]), true, false
}

// challengeExpiry reads a signed challenge's expiry (checked already).
func challengeExpiry(challenge string) (time.Time, bool) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(challenge)
	if err != nil || len(b) != signedBytes {
		return time.Time{}, false
	}
	return time.Unix(int64(binary.BigEndian.Uint64(b[nonceBytes:])), 0), true
}

// newChallenge returns 32 random bytes as unpadded base64url.
func newChallenge() (string, error) {
	var b [challengeBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("attestation: challenge: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// wellFormedChallenge reports whether s could be a challenge we issued.
func wellFormedChallenge(s string) bool {
	if len(s) != challengeLen {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil && len(b) == challengeBytes // CR and LF are skipped, not refused
}

// RedisChallenges serves challenges to every limiter replica that
// shares a Redis without storing one per challenge: a challenge is
// signed, not kept (signedChallenge: a nonce, its expiry and an HMAC of
// both and the device id, by a secret the replicas share through Redis),
// so issuing one writes nothing, and a flood of challenge requests from
// rotating addresses cannot fill the Redis that holds the buckets. Using
// one sets a marker key, prefix+"{device:<id>}:chu:<nonce>", with SET NX
// until the challenge expires, so it passes once however many replicas
// race; the handlers use one up only once its attestation verified
// (Check first, Consume after). A challenge of the earlier form (32
// random bytes, a key of its own) is still consumed, for an upgrade.
// Expiry is by the now arguments. Safe for concurrent use.
type RedisChallenges struct {
	c      redis.UniversalClient
	prefix string

	mu       sync.Mutex
	secret   []byte    // nil until read
	readAt   time.Time // when secret was read
	retryAt  time.Time // a failed verification reads it again from then on
	randRead func([]byte) (int, error)
}

// NewRedisChallenges returns challenges signed by the secret kept in c
// under prefix (made there by the first replica that needs it).
func NewRedisChallenges(c redis.UniversalClient, prefix string) *RedisChallenges {
	return &RedisChallenges{c: c, prefix: prefix, randRead: rand.Read}
}

// secretRefresh is how often a replica reads the shared secret again:
// one that Redis lost (a restart without persistence) is made again by
// the first replica to notice, and the others follow within this.
const secretRefresh = time.Minute

// key returns the shared secret, reading it from Redis (and making it
// there when it is missing) when it is older than secretRefresh, or when
// reread and a verification failed since retryAt.
func (r *RedisChallenges) key(ctx context.Context, now time.Time, reread bool) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.secret == nil, now.Sub(r.readAt) >= secretRefresh, now.Before(r.readAt):
		// none yet, or read a minute ago (or by a clock that went back)
	case reread && !now.Before(r.retryAt):
		// a signature failed: another replica may have made a new secret
	default:
		return r.secret, nil
	}
	var b [32]byte
	if _, err := r.randRead(b[:]); err != nil {
		return nil, fmt.Errorf("attestation: challenge secret: %w", err)
	}
	k := bucket.ChallengeSecretKey(r.prefix)
	if err := r.c.SetNX(ctx, k, b[:], 0).Err(); err != nil {
		return nil, fmt.Errorf("%w: redis: challenge secret: %w", ErrUnavailable, err)
	}
	v, err := r.c.Get(ctx, k).Bytes()
	if err != nil {
		return nil, fmt.Errorf("%w: redis: challenge secret: %w", ErrUnavailable, err)
	}
	r.secret, r.readAt, r.retryAt = v, now, now.Add(time.Second)
	return v, nil
}

// Issue implements Challenges: nothing is written.
func (r *RedisChallenges) Issue(ctx context.Context, deviceID string, now time.Time) (string, time.Time, error) {
	key, err := r.key(ctx, now, false)
	if err != nil {
		return "", time.Time{}, err
	}
	exp := now.Add(ChallengeTTL)
	ch, err := signChallenge(key, deviceID, exp, r.randRead)
	if err != nil {
		return "", time.Time{}, err
	}
	return ch, exp, nil
}

// Check implements Challenges: a signed challenge is checked by its
// signature and expiry and whether it was used; one of the earlier form
// by its key.
func (r *RedisChallenges) Check(ctx context.Context, deviceID, challenge string, now time.Time) error {
	if wellFormedChallenge(challenge) {
		return r.exists(ctx, challengeKey(r.prefix, deviceID, challenge), true)
	}
	nonce, err := r.verify(ctx, deviceID, challenge, now)
	if err != nil {
		return err
	}
	return r.exists(ctx, bucket.ChallengeUsedKey(r.prefix, deviceID, nonce), false)
}

// exists is nil when key exists, as want says (true: it must), else the
// challenge error.
func (r *RedisChallenges) exists(ctx context.Context, key string, want bool) error {
	n, err := r.c.Exists(ctx, key).Result()
	if err != nil {
		return fmt.Errorf("%w: redis: check challenge: %w", ErrUnavailable, err)
	}
	if (n == 1) != want {
		return errChallenge()
	}
	return nil
}

// challengeKey returns the key of a challenge of the earlier form,
// prefix+"{device:<escaped id>}:ch:<challenge>".
func challengeKey(prefix, deviceID, challenge string) string {
	return bucket.ChallengeKey(prefix, deviceID, challenge)
}

// Consume implements Challenges.
func (r *RedisChallenges) Consume(ctx context.Context, deviceID, challenge string, now time.Time) error {
	if wellFormedChallenge(challenge) {
		err := r.c.GetDel(ctx, challengeKey(r.prefix, deviceID, challenge)).Err()
		switch {
		case errors.Is(err, redis.Nil):
			return errChallenge()
		case err != nil:
			return fmt.Errorf("%w: redis: consume challenge: %w", ErrUnavailable, err)
		}
		return nil
	}
	nonce, err := r.verify(ctx, deviceID, challenge, now)
	if err != nil {
		return err
	}
	exp, _ := challengeExpiry(challenge)
	set, err := r.c.SetNX(ctx, bucket.ChallengeUsedKey(r.prefix, deviceID, nonce), "1", exp.Sub(now)).Result()
	if err != nil {
		return fmt.Errorf("%w: redis: consume challenge: %w", ErrUnavailable, err)
	}
	if !set {
		return errChallenge()
	}
	return nil
}

// verify checks a signed challenge of deviceID at now and returns its
// nonce. A signature the cached secret does not verify is checked once
// more against the secret read again (another replica may have made a
// new one after Redis lost it).
func (r *RedisChallenges) verify(ctx context.Context, deviceID, challenge string, now time.Time) (string, error) {
	for _, reread := range []bool{false, true} {
		key, err := r.key(ctx, now, reread)
		if err != nil {
			return "", err
		}
		nonce, ok, expired := checkSigned(key, deviceID, challenge, now)
		switch {
		case expired:
			return "", errChallenge()
		case ok:
			return nonce, nil
		}
	}
	return "", errChallenge()
}

// DefaultMaxChallenges bounds a MemoryChallenges made with max <= 0.
const DefaultMaxChallenges = 100_000

// MemoryChallenges keeps challenges in process, for a single limiter. It
// holds at most max live challenges: expired ones are swept on every
// call, and when it is still full the oldest is evicted (its device must
// ask again). Safe for concurrent use.
type MemoryChallenges struct {
	mu    sync.Mutex
	max   int
	live  map[string]time.Time // device id + "\x00" + challenge -> expiry
	queue []memEntry           // issue order; entries may be stale
	head  int
}

type memEntry struct {
	key     string
	expires time.Time
}

// NewMemoryChallenges returns in-process challenges holding at most max
// (DefaultMaxChallenges when max <= 0).
func NewMemoryChallenges(max int) *MemoryChallenges {
	if max <= 0 {
		max = DefaultMaxChallenges
	}
	return &MemoryChallenges{max: max, live: make(map[string]time.Time)}
}

// Len returns the number of challenges held (expired ones included until swept).
func (m *MemoryChallenges) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.live)
}

// Issue implements Challenges.
func (m *MemoryChallenges) Issue(_ context.Context, deviceID string, now time.Time) (string, time.Time, error) {
	ch, err := newChallenge()
	if err != nil {
		return "", time.Time{}, err
	}
	exp := now.Add(ChallengeTTL)
	k := deviceID + "\x00" + ch
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweepLocked(now)
	for len(m.live) >= m.max && m.head < len(m.queue) {
		m.popLocked()
	}
	m.live[k] = exp
	m.queue = append(m.queue, memEntry{key: k, expires: exp})
	m.compactLocked()
	return ch, exp, nil
}

// Check implements Challenges.
func (m *MemoryChallenges) Check(_ context.Context, deviceID, challenge string, now time.Time) error {
	if !wellFormedChallenge(challenge) {
		return errChallenge()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if exp, ok := m.live[deviceID+"\x00"+challenge]; !ok || !now.Before(exp) {
		return errChallenge()
	}
	return nil
}

// Consume implements Challenges.
func (m *MemoryChallenges) Consume(_ context.Context, deviceID, challenge string, now time.Time) error {
	if !wellFormedChallenge(challenge) {
		return errChallenge()
	}
	k := deviceID + "\x00" + challenge
	m.mu.Lock()
	defer m.mu.Unlock()
	exp, ok := m.live[k]
	if !ok {
		return errChallenge()
	}
	delete(m.live, k)
	if !now.Before(exp) {
		return errChallenge()
	}
	return nil
}

// sweepLocked drops expired and stale entries from the queue's front.
// m.mu must be held.
func (m *MemoryChallenges) sweepLocked(now time.Time) {
	for m.head < len(m.queue) {
		e := m.queue[m.head]
		exp, ok := m.live[e.key]
		current := ok && exp.Equal(e.expires)
		if current && now.Before(exp) {
			return
		}
		m.popLocked()
	}
}

// popLocked removes the queue's front entry, and its challenge when the
// entry is current. m.mu must be held.
func (m *MemoryChallenges) popLocked() {
	e := m.queue[m.head]
	if exp, ok := m.live[e.key]; ok && exp.Equal(e.expires) {
		delete(m.live, e.key)
	}
	m.queue[m.head] = memEntry{}
	m.head++
}

// compactLocked keeps the queue's storage proportional to the live
// challenges: consumed entries leave stale queue entries behind.
// m.mu must be held.
func (m *MemoryChallenges) compactLocked() {
	if m.head > 0 && m.head >= len(m.queue)/2 {
		n := copy(m.queue, m.queue[m.head:])
		clear(m.queue[n:])
		m.queue, m.head = m.queue[:n], 0
	}
	if len(m.queue) > 2*m.max+64 {
		out := m.queue[:0]
		for _, e := range m.queue {
			if exp, ok := m.live[e.key]; ok && exp.Equal(e.expires) {
				out = append(out, e)
			}
		}
		clear(m.queue[len(out):])
		m.queue = out
	}
}

// Compile-time checks.
var (
	_ Challenges = (*RedisChallenges)(nil)
	_ Challenges = (*MemoryChallenges)(nil)
)
