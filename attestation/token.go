package attestation

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MinTokenKeyLen is the shortest device-token key accepted, in bytes.
const MinTokenKeyLen = 32

// tokenVersion starts every device token; a new format gets a new one.
const tokenVersion = "dt1"

// ErrTokenKey reports a device-token key that is missing or too short.
var ErrTokenKey = errors.New("attestation: device token key")

// Tokens issues and verifies device tokens (contract 6.3): proof that a
// device id passed attestation (or an App Attest assertion), checked
// without a store read. A token is
//
//	"dt1." + expiry (Unix seconds, decimal) + "." + base64url(HMAC-SHA256(key, "dt1|" + expiry + "|" + device id))
//
// so any limiter host holding the same key verifies a token another
// issued, and a token names neither the key nor anything secret. A token
// is valid for exactly one device id until its expiry. Safe for
// concurrent use; the zero value verifies nothing.
type Tokens struct {
	key []byte
}

// NewTokens returns Tokens keyed by key (at least MinTokenKeyLen bytes).
func NewTokens(key []byte) (*Tokens, error) {
	if len(key) < MinTokenKeyLen {
		return nil, fmt.Errorf("%w: %d bytes, at least %d needed", ErrTokenKey, len(key), MinTokenKeyLen)
	}
	return &Tokens{key: append([]byte(nil), key...)}, nil
}

// RandomTokens returns Tokens with a random key: tokens verify only in
// this process (a limiter without risk.attestation.token_key_env).
func RandomTokens() *Tokens {
	k := make([]byte, MinTokenKeyLen)
	_, _ = rand.Read(k)
	return &Tokens{key: k}
}

// TokensFromPolicy returns the Tokens of the policy's
// risk.attestation.token_key_env, read through getenv (the raw bytes of
// the variable's value are the key). With no variable named it returns
// nil, nil (the caller decides; see RandomTokens). Errors name the
// variable, never the key.
func TokensFromPolicy(env string, getenv func(string) string) (*Tokens, error) {
	if env == "" {
		return nil, nil
	}
	v := getenv(env)
	if v == "" {
		return nil, fmt.Errorf("%w: environment variable %s (token_key_env) is empty or unset", ErrTokenKey, env)
	}
	t, err := NewTokens([]byte(v))
	if err != nil {
		return nil, fmt.Errorf("%w: environment variable %s (token_key_env) holds %d bytes, at least %d needed (e.g. openssl rand -hex 32)",
			ErrTokenKey, env, len(v), MinTokenKeyLen)
	}
	return t, nil
}

// Issue returns a token for deviceID that expires at expires (rounded
// down to the second).
func (t *Tokens) Issue(deviceID string, expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	return tokenVersion + "." + exp + "." + base64.RawURLEncoding.EncodeToString(t.mac(exp, deviceID))
}

// Verify reports whether token is a token of deviceID unexpired at now.
// A nil Tokens, an empty token or device id, a malformed, forged, expired
// or another device's token are all simply false.
func (t *Tokens) Verify(token, deviceID string, now time.Time) bool {
	exp, ok := t.Expiry(token, deviceID)
	return ok && now.Before(exp)
}

// Expiry returns the expiry of token when it is a token this key issued
// for deviceID, expired or not (ok false otherwise, as Verify). Only the
// claim of a device id whose attestation lapsed asks for an expired
// token (its holder's proof of having held the id); every request's
// proof is Verify.
func (t *Tokens) Expiry(token, deviceID string) (time.Time, bool) {
	if t == nil || len(t.key) == 0 || token == "" || deviceID == "" || len(token) > 128 {
		return time.Time{}, false
	}
	rest, ok := strings.CutPrefix(token, tokenVersion+".")
	if !ok {
		return time.Time{}, false
	}
	exp, sig, ok := strings.Cut(rest, ".")
	if !ok || exp == "" || len(exp) > 12 {
		return time.Time{}, false
	}
	secs, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || secs <= 0 || strconv.FormatInt(secs, 10) != exp {
		return time.Time{}, false
	}
	// one spelling per token: the decoder skips CR and LF even when
	// strict, so a MAC's length is what rules them out
	if len(sig) != base64.RawURLEncoding.EncodedLen(sha256.Size) {
		return time.Time{}, false
	}
	got, err := base64.RawURLEncoding.Strict().DecodeString(sig)
	if err != nil || !hmac.Equal(got, t.mac(exp, deviceID)) {
		return time.Time{}, false
	}
	return time.Unix(secs, 0), true
}

// mac is HMAC-SHA256(key, "dt1|" + exp + "|" + deviceID).
func (t *Tokens) mac(exp, deviceID string) []byte {
	h := hmac.New(sha256.New, t.key)
	h.Write([]byte(tokenVersion + "|" + exp + "|"))
	h.Write([]byte(deviceID))
	return h.Sum(nil)
}
