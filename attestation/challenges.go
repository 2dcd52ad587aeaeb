package attestation

import (
	"context"
	"crypto/rand"
	"encoding/base64"
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
	// Consume uses up challenge for deviceID.
	Consume(ctx context.Context, deviceID, challenge string, now time.Time) error
}

// errChallenge is the one answer for a challenge that cannot be used: the
// app learns no more than that.
func errChallenge() *Error {
	return fail(StepChallenge, "unknown, expired or already used for this device; request a new one")
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

// RedisChallenges keeps challenges in Redis, shared by every limiter
// replica: one key per challenge, prefix+"{device:<id>}:ch:<challenge>",
// set with a 5-minute expiry and taken with GETDEL, so a challenge passes
// once however many replicas race. Expiry is Redis's: the now arguments
// only compute the expires_at returned. Safe for concurrent use.
type RedisChallenges struct {
	c      redis.UniversalClient
	prefix string
}

// NewRedisChallenges returns challenges kept in c under prefix.
func NewRedisChallenges(c redis.UniversalClient, prefix string) *RedisChallenges {
	return &RedisChallenges{c: c, prefix: prefix}
}

// challengeKey returns prefix+"{device:<escaped id>}:ch:<challenge>".
func challengeKey(prefix, deviceID, challenge string) string {
	return bucket.ChallengeKey(prefix, deviceID, challenge)
}

// Issue implements Challenges.
func (r *RedisChallenges) Issue(ctx context.Context, deviceID string, now time.Time) (string, time.Time, error) {
	ch, err := newChallenge()
	if err != nil {
		return "", time.Time{}, err
	}
	if err := r.c.Set(ctx, challengeKey(r.prefix, deviceID, ch), "1", ChallengeTTL).Err(); err != nil {
		return "", time.Time{}, fmt.Errorf("%w: redis: set challenge: %w", ErrUnavailable, err)
	}
	return ch, now.Add(ChallengeTTL), nil
}

// Consume implements Challenges.
func (r *RedisChallenges) Consume(ctx context.Context, deviceID, challenge string, _ time.Time) error {
	if !wellFormedChallenge(challenge) {
		return errChallenge()
	}
	err := r.c.GetDel(ctx, challengeKey(r.prefix, deviceID, challenge)).Err()
	switch {
	case errors.Is(err, redis.Nil):
		return errChallenge()
	case err != nil:
		return fmt.Errorf("%w: redis: consume challenge: %w", ErrUnavailable, err)
	}
	return nil
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
