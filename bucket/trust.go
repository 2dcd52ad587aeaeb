package bucket

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The administration of trust sets (7.1): who is trusted, and taking that
// trust away. A trusted device is spared its account's exempt_attested
// lockouts and spends a budget of its own, so a security team must be
// able to see an account's trusted devices and revoke one (a stolen
// phone) or all (a compromised account), and freeing a device id for a
// new attestation must take it out of every account that trusted it.
//
// The Redis store keeps, beside each account's trust set
// (<prefix>{account:<id>}:t, device -> end), an index of the accounts
// that trust each device (<prefix>{device:<id>}:ta, account -> end),
// written by Trust with the same end, so that a device is found in every
// account without a scan. The two live in different slots of a Cluster:
// each is written by a script of its own, and a revocation that fails
// between them leaves an index entry whose set no longer holds the device
// (harmless: the next revocation skips it) or the reverse (retried by the
// caller, who was answered an error).

// MaxTrustedDevices bounds an account's trust set: an enrolment past it
// drops the devices whose trust ends first. A person's phones, tablets and
// reinstalls within trusted_for stay far below it; an attacker who logs
// minted attested ids in to an account of his own (risk.attestation
// max_per_ip bounds the minting per address, not per account) no longer
// grows its set, and the Redis memory it holds, without end.
const MaxTrustedDevices = 100

// TrustedDevice is one device of a trust set and when its trust ends.
type TrustedDevice struct {
	Device string
	Until  time.Time
}

// TrustAdmin is the administration of trust sets both stores implement.
type TrustAdmin interface {
	// TrustedDevices lists the devices of s's trust set in force, the
	// latest ending first (then by id).
	TrustedDevices(ctx context.Context, s Subject) ([]TrustedDevice, error)
	// Untrust takes device out of s's trust set, or with device "" every
	// device; it reports whether one was trusted.
	Untrust(ctx context.Context, s Subject, device string) (bool, error)
	// UntrustDevice takes device out of the trust set of every account
	// that trusts it and returns how many did.
	UntrustDevice(ctx context.Context, device string) (int, error)
}

// trustIndexSuffix follows a device's hash tag in the key of the index of
// the accounts that trust it.
const trustIndexSuffix = ":ta"

// trustIndexKey returns the key of the index of the accounts that trust
// device.
func trustIndexKey(prefix, device string) string {
	return subjectKey(prefix, Subject{Kind: "device", ID: device}, trustIndexSuffix)
}

// sortTrusted orders ds the latest ending first, then by device.
func sortTrusted(ds []TrustedDevice) {
	slices.SortFunc(ds, func(a, b TrustedDevice) int {
		if c := b.Until.Compare(a.Until); c != 0 {
			return c
		}
		return strings.Compare(a.Device, b.Device)
	})
}

// TrustedDevices implements TrustAdmin.
func (s *RedisStore) TrustedDevices(ctx context.Context, sub Subject) ([]TrustedDevice, error) {
	if err := sub.check(); err != nil {
		return nil, err
	}
	key := subjectKey(s.prefix, sub, ":t")
	v, err := trustListScript.Run(ctx, s.c, []string{key}).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("%w: trusted devices %s: %w", ErrUnavailable, key, err)
	}
	out := make([]TrustedDevice, 0, len(v)/2)
	for i := 0; i+1 < len(v); i += 2 {
		us, err := strconv.ParseInt(v[i+1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: trusted devices %s: end %q: %w", ErrUnavailable, key, v[i+1], err)
		}
		out = append(out, TrustedDevice{Device: v[i], Until: time.UnixMicro(us)})
	}
	sortTrusted(out)
	return out, nil
}

// trustListScript returns the members of a trust set (or index) in force
// and their ends in µs, flat: member, end, member, end. KEYS[1] set.
var trustListScript = redis.NewScript(`
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local typ = redis.call("TYPE", KEYS[1]).ok
if typ == "set" then
  local ttl = redis.call("PTTL", KEYS[1])
  local out = {}
  for _, m in ipairs(redis.call("SMEMBERS", KEYS[1])) do
    out[#out + 1] = m
    out[#out + 1] = string.format("%d", now + ttl * 1000)
  end
  return out
end
if typ ~= "zset" then return {} end
local v = redis.call("ZRANGE", KEYS[1], "(" .. now, "+inf", "BYSCORE", "WITHSCORES")
for i = 2, #v, 2 do v[i] = string.format("%d", tonumber(v[i])) end
return v`)

// untrustScript removes ARGV[1] (every member when "") from a trust set
// or index and returns the members it removed that were in force, so that
// the caller can update the other side. KEYS[1] set.
var untrustScript = redis.NewScript(`
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local typ = redis.call("TYPE", KEYS[1]).ok
if typ == "set" then
  local all = redis.call("SMEMBERS", KEYS[1])
  if ARGV[1] == "" then
    redis.call("DEL", KEYS[1])
    return all
  end
  return redis.call("SREM", KEYS[1], ARGV[1]) == 1 and {ARGV[1]} or {}
end
if typ ~= "zset" then return {} end
local live = {}
if ARGV[1] == "" then
  live = redis.call("ZRANGE", KEYS[1], "(" .. now, "+inf", "BYSCORE")
  redis.call("DEL", KEYS[1])
  return live
end
local end_ = redis.call("ZSCORE", KEYS[1], ARGV[1])
redis.call("ZREM", KEYS[1], ARGV[1])
if end_ and tonumber(end_) > now then return {ARGV[1]} end
return {}`)

// Untrust implements TrustAdmin. The device index is updated after the
// set: a revocation is never missed by the decisions it is for.
func (s *RedisStore) Untrust(ctx context.Context, sub Subject, device string) (bool, error) {
	if err := sub.check(); err != nil {
		return false, err
	}
	key := subjectKey(s.prefix, sub, ":t")
	removed, err := untrustScript.Run(ctx, s.c, []string{key}, device).StringSlice()
	if err != nil {
		return false, fmt.Errorf("%w: untrust %s: %w", ErrUnavailable, key, err)
	}
	if sub.Kind == "account" {
		devices := removed
		if device != "" {
			devices = []string{device} // its index entry goes, in force or not
		}
		for _, d := range devices {
			ik := trustIndexKey(s.prefix, d)
			if err := untrustScript.Run(ctx, s.c, []string{ik}, sub.ID).Err(); err != nil {
				return len(removed) > 0, fmt.Errorf("%w: untrust %s: %w", ErrUnavailable, ik, err)
			}
		}
	}
	return len(removed) > 0, nil
}

// UntrustDevice implements TrustAdmin: it reads the device's index (its
// entries in force: an ended one's account no longer trusts the device),
// takes the device out of each account's set, then drops the index
// entries it read (not the index: an enrolment made meanwhile keeps its
// entry).
func (s *RedisStore) UntrustDevice(ctx context.Context, device string) (int, error) {
	if device == "" {
		return 0, fmt.Errorf("%w: untrust device: empty id", ErrBadRequest)
	}
	ik := trustIndexKey(s.prefix, device)
	v, err := trustListScript.Run(ctx, s.c, []string{ik}).StringSlice()
	if err != nil {
		return 0, fmt.Errorf("%w: untrust device %s: %w", ErrUnavailable, ik, err)
	}
	n := 0
	for i := 0; i < len(v); i += 2 { // account, end
		a := v[i]
		key := subjectKey(s.prefix, Subject{Kind: "account", ID: a}, ":t")
		removed, err := untrustScript.Run(ctx, s.c, []string{key}, device).StringSlice()
		if err != nil {
			return n, fmt.Errorf("%w: untrust %s: %w", ErrUnavailable, key, err)
		}
		if len(removed) > 0 {
			n++
		}
		if err := untrustScript.Run(ctx, s.c, []string{ik}, a).Err(); err != nil {
			return n, fmt.Errorf("%w: untrust device %s: %w", ErrUnavailable, ik, err)
		}
	}
	return n, nil
}

// TrustedDevices implements TrustAdmin.
func (s *MemoryStore) TrustedDevices(_ context.Context, sub Subject) ([]TrustedDevice, error) {
	if err := sub.check(); err != nil {
		return nil, err
	}
	now := s.now()
	s.mu.RLock()
	defer s.mu.RUnlock()
	set := s.trusts[subjectKey(s.prefix, sub, ":t")]
	out := make([]TrustedDevice, 0, len(set))
	for d, until := range set {
		if until.After(now) {
			out = append(out, TrustedDevice{Device: d, Until: until})
		}
	}
	sortTrusted(out)
	return out, nil
}

// Untrust implements TrustAdmin.
func (s *MemoryStore) Untrust(_ context.Context, sub Subject, device string) (bool, error) {
	if err := sub.check(); err != nil {
		return false, err
	}
	now := s.now()
	key := subjectKey(s.prefix, sub, ":t")
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.trusts[key]
	was := false
	for d, until := range set {
		if device == "" || d == device {
			was = was || until.After(now)
			s.dropTrustLocked(key, set, d)
		}
	}
	return was, nil
}

// UntrustDevice implements TrustAdmin: the memory store finds the device's
// accounts in its device index, as the Redis store does, so a freed id
// costs the accounts that trusted it, not a pass over every trust set
// under the store's lock (which a replay of a breach's thousands of
// forgotten attestations would pay once each).
func (s *MemoryStore) UntrustDevice(_ context.Context, device string) (int, error) {
	if device == "" {
		return 0, fmt.Errorf("%w: untrust device: empty id", ErrBadRequest)
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for key := range s.trustedBy[device] {
		if kind, _, ok := ParseSubjectKey(key); !ok || kind != "account" {
			continue
		}
		set := s.trusts[key]
		if set[device].After(now) {
			n++
		}
		s.dropTrustLocked(key, set, device)
	}
	return n, nil
}
