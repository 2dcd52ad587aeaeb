package attestation

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/bucket"
)

// Platforms of a Status.
const (
	PlatformApple   = "apple"
	PlatformAndroid = "android"
)

// Status is what Tollgate remembers about a device's attestation.
type Status struct {
	// Platform is PlatformApple or PlatformAndroid.
	Platform string `json:"platform"`
	// Verified reports that the attestation passed.
	Verified bool `json:"verified"`
	// VerifiedAt is when it passed (the last assertion, for App Attest);
	// ExpiresAt is when it stops counting (VerifiedAt + valid_for).
	VerifiedAt time.Time `json:"verified_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	// KeyID is the App Attest key id, standard base64 ("" on Android).
	KeyID string `json:"key_id,omitempty"`
	// Counter is the App Attest sign counter of the last verified
	// assertion (0 right after attestation).
	Counter uint32 `json:"counter"`
	// PublicKey is the attested App Attest key, PKIX DER (nil on Android).
	PublicKey []byte `json:"public_key,omitempty"`
	// Reason is free text for operators ("app attest verified").
	Reason string `json:"reason,omitempty"`
	// HeldUntil, when after ExpiresAt, keeps the status past its end: the
	// device id stays bound to its last attestation (its App Attest key,
	// its last device token) while the id may still be a trusted device
	// of an account (risk.attestation.trusted_for after ExpiresAt), so no
	// other device can attest under it (api: the claim). A status of an
	// older version has none: it is kept until ExpiresAt.
	HeldUntil time.Time `json:"held_until,omitzero"`
}

// Valid reports whether s is a verified attestation still in force at now.
func (s Status) Valid(now time.Time) bool { return s.Verified && now.Before(s.ExpiresAt) }

// KeptUntil is when the status is dropped: the later of ExpiresAt and
// HeldUntil.
func (s Status) KeptUntil() time.Time {
	if s.HeldUntil.After(s.ExpiresAt) {
		return s.HeldUntil
	}
	return s.ExpiresAt
}

// Kept reports whether s is a verified attestation in force or held at
// now: its device id is bound to it.
func (s Status) Kept(now time.Time) bool { return s.Verified && now.Before(s.KeptUntil()) }

// Key parses PublicKey, the attested App Attest key.
func (s Status) Key() (*ecdsa.PublicKey, error) {
	if len(s.PublicKey) == 0 {
		return nil, errors.New("attestation: status has no public key")
	}
	k, err := x509.ParsePKIXPublicKey(s.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("attestation: status public key: %w", err)
	}
	pub, ok := k.(*ecdsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("attestation: status public key is %T, not ECDSA", k)
	}
	return pub, nil
}

// Devices remembers each device's attestation Status until its KeptUntil
// (its ExpiresAt, or its HeldUntil when later). Store failures wrap
// ErrUnavailable. Implementations are safe for concurrent use.
type Devices interface {
	// Get returns the device's status while it is kept: in force
	// (Status.Valid) or lapsed and held (Status.HeldUntil); ok is false
	// when none is kept. Callers judge Valid themselves.
	Get(ctx context.Context, deviceID string) (s Status, ok bool, err error)
	// Put replaces the device's status; it lasts s.KeptUntil() - s.VerifiedAt.
	Put(ctx context.Context, deviceID string, s Status) error
	// Advance replaces the device's status after a verified App Attest
	// assertion, atomically, only when the kept status has s.KeyID and a
	// Counter below s.Counter: of two assertions with the same counter,
	// one passes. Otherwise it returns an *Error of Step "counter" (counter
	// not greater) or "key id" (no status, or one for another key).
	Advance(ctx context.Context, deviceID string, s Status) error
	// Forget drops the device's status, in force or held, and reports
	// whether one was kept: an operator frees an id whose owner lost both
	// its App Attest key and its last device token, so that any genuine
	// device may attest it (the admin API's DELETE of its attestation).
	Forget(ctx context.Context, deviceID string) (bool, error)
}

// ttlOf returns how long s is kept (until KeptUntil).
func ttlOf(s Status) (time.Duration, error) {
	if s.VerifiedAt.IsZero() || !s.ExpiresAt.After(s.VerifiedAt) {
		return 0, fmt.Errorf("attestation: status needs VerifiedAt before ExpiresAt (got %v, %v)", s.VerifiedAt, s.ExpiresAt)
	}
	return s.KeptUntil().Sub(s.VerifiedAt), nil
}

// encodeStatus returns s as stored in Redis and how long it is kept.
func encodeStatus(s Status) ([]byte, time.Duration, error) {
	ttl, err := ttlOf(s)
	if err != nil {
		return nil, 0, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, 0, fmt.Errorf("attestation: status: %w", err)
	}
	return b, ttl, nil
}

func errNoKey() *Error {
	return fail(StepKeyID, "no attested App Attest key for this device and key id; attest first")
}

func errCounter(got, last uint32) *Error {
	return fail(StepCounter, fmt.Sprintf("%d is not greater than the last seen %d (replayed assertion?)", got, last))
}

// RedisDevices keeps statuses in Redis as JSON at
// prefix+"{device:<escaped id>}:att", expiring KeptUntil - VerifiedAt
// after the write (relative, so the limiter's and Redis's clocks need not
// agree). Safe for concurrent use.
type RedisDevices struct {
	c      redis.UniversalClient
	prefix string
}

// NewRedisDevices returns statuses kept in c under prefix.
func NewRedisDevices(c redis.UniversalClient, prefix string) *RedisDevices {
	return &RedisDevices{c: c, prefix: prefix}
}

// StatusKey returns the Redis key of a device's status:
// prefix+"{device:<escaped id>}:att".
func StatusKey(prefix, deviceID string) string {
	return bucket.AttestationKey(prefix, deviceID)
}

// Get implements Devices.
func (r *RedisDevices) Get(ctx context.Context, deviceID string) (Status, bool, error) {
	b, err := r.c.Get(ctx, StatusKey(r.prefix, deviceID)).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return Status{}, false, nil
	case err != nil:
		return Status{}, false, fmt.Errorf("%w: redis: get status: %w", ErrUnavailable, err)
	}
	var s Status
	if err := json.Unmarshal(b, &s); err != nil {
		return Status{}, false, fmt.Errorf("attestation: redis: status of device %q is not valid JSON: %w", deviceID, err)
	}
	return s, true, nil
}

// Put implements Devices.
func (r *RedisDevices) Put(ctx context.Context, deviceID string, s Status) error {
	b, ttl, err := encodeStatus(s)
	if err != nil {
		return err
	}
	if err := r.c.Set(ctx, StatusKey(r.prefix, deviceID), b, ttl).Err(); err != nil {
		return fmt.Errorf("%w: redis: put status: %w", ErrUnavailable, err)
	}
	return nil
}

// Advance implements Devices with one script (advanceScript).
func (r *RedisDevices) Advance(ctx context.Context, deviceID string, s Status) error {
	b, ttl, err := encodeStatus(s)
	if err != nil {
		return err
	}
	reply, err := advanceScript.Run(ctx, r.c, []string{StatusKey(r.prefix, deviceID)},
		s.KeyID, strconv.FormatUint(uint64(s.Counter), 10), b, ttl.Milliseconds()).Result()
	if err != nil {
		return fmt.Errorf("%w: redis: advance counter: %w", ErrUnavailable, err)
	}
	vals, ok := reply.([]any)
	if !ok || len(vals) != 2 {
		return fmt.Errorf("attestation: redis: advance counter: unexpected reply %v", reply)
	}
	code, ok1 := vals[0].(int64)
	last, ok2 := vals[1].(int64)
	if !ok1 || !ok2 {
		return fmt.Errorf("attestation: redis: advance counter: unexpected reply %v", reply)
	}
	switch code {
	case 1:
		return nil
	case -1:
		return errCounter(s.Counter, uint32(last))
	case -2:
		return errNoKey()
	}
	return fmt.Errorf("attestation: redis: status of device %q is not valid JSON", deviceID)
}

// Forget implements Devices.
func (r *RedisDevices) Forget(ctx context.Context, deviceID string) (bool, error) {
	n, err := r.c.Del(ctx, StatusKey(r.prefix, deviceID)).Result()
	if err != nil {
		return false, fmt.Errorf("%w: redis: forget status: %w", ErrUnavailable, err)
	}
	return n > 0, nil
}

// DefaultMaxDevices bounds a MemoryDevices made with max <= 0.
const DefaultMaxDevices = 100_000

// MemoryDevices keeps statuses in process, for a single limiter. It holds
// at most max devices: when full, statuses past their KeptUntil are
// dropped, then the one kept the shortest (a held id then loses its
// binding early: size max for the devices of trusted_for). Safe for concurrent use.
type MemoryDevices struct {
	mu  sync.Mutex
	max int
	now func() time.Time
	m   map[string]Status
}

// NewMemoryDevices returns in-process statuses holding at most max
// (DefaultMaxDevices when max <= 0), expiring by the clock now (time.Now
// when nil).
func NewMemoryDevices(max int, now func() time.Time) *MemoryDevices {
	if max <= 0 {
		max = DefaultMaxDevices
	}
	if now == nil {
		now = time.Now
	}
	return &MemoryDevices{max: max, now: now, m: make(map[string]Status)}
}

// Len returns the number of statuses held (expired ones included until dropped).
func (d *MemoryDevices) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.m)
}

// Get implements Devices.
func (d *MemoryDevices) Get(_ context.Context, deviceID string) (Status, bool, error) {
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.m[deviceID]
	if !ok {
		return Status{}, false, nil
	}
	if !now.Before(s.KeptUntil()) {
		delete(d.m, deviceID)
		return Status{}, false, nil
	}
	s.PublicKey = append([]byte(nil), s.PublicKey...)
	return s, true, nil
}

// Put implements Devices.
func (d *MemoryDevices) Put(_ context.Context, deviceID string, s Status) error {
	if _, err := ttlOf(s); err != nil {
		return err
	}
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.putLocked(deviceID, s, now)
	return nil
}

// Advance implements Devices.
func (d *MemoryDevices) Advance(_ context.Context, deviceID string, s Status) error {
	if _, err := ttlOf(s); err != nil {
		return err
	}
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	cur, ok := d.m[deviceID]
	if !ok || !now.Before(cur.KeptUntil()) || cur.KeyID != s.KeyID {
		return errNoKey()
	}
	if cur.Counter >= s.Counter {
		return errCounter(s.Counter, cur.Counter)
	}
	d.putLocked(deviceID, s, now)
	return nil
}

// Forget implements Devices.
func (d *MemoryDevices) Forget(_ context.Context, deviceID string) (bool, error) {
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.m[deviceID]
	delete(d.m, deviceID)
	return ok && now.Before(s.KeptUntil()), nil
}

// putLocked stores s, making room first. d.mu must be held.
func (d *MemoryDevices) putLocked(deviceID string, s Status, now time.Time) {
	s.PublicKey = append([]byte(nil), s.PublicKey...)
	if _, ok := d.m[deviceID]; !ok && len(d.m) >= d.max {
		victim, soonest := "", time.Time{}
		for k, v := range d.m {
			if !now.Before(v.KeptUntil()) {
				delete(d.m, k)
				continue
			}
			if victim == "" || v.KeptUntil().Before(soonest) {
				victim, soonest = k, v.KeptUntil()
			}
		}
		if len(d.m) >= d.max {
			delete(d.m, victim)
		}
	}
	d.m[deviceID] = s
}

// Compile-time checks.
var (
	_ Devices = (*RedisDevices)(nil)
	_ Devices = (*MemoryDevices)(nil)
)
