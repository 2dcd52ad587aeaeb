// Package usersig signs and verifies the signed user header of the
// identity section (contract 2.x and 7.1).
//
// Two forms are accepted:
//
//   - bare: hex HMAC-SHA256(key, user id), the 2.x form. It never
//     expires, so a leaked header replays for ever; a policy can refuse
//     it (identity.user_signature_require_timestamp).
//   - timestamped: "t=<unix seconds>,v1=<hex HMAC-SHA256(key, "<t>.<user id>")>",
//     as Stripe signs webhooks. It is valid while t is within a maximum
//     age of the verifier's clock, in either direction (a signer's clock
//     may run ahead).
//
// Several keys may verify (key rotation): a signature made with any of
// them is valid. In the timestamped form the header may carry several
// v1 entries (a signer in the middle of a rotation signs with both
// keys); any one that verifies is enough. Elements other than t and v1
// with a well-formed name (a later scheme such as v2) are ignored, so a
// signer can add one before every verifier knows it.
//
// The package has no state; its functions are safe for concurrent use.
package usersig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// DefaultMaxAge is how far a timestamped signature's t may be from the
// verifier's clock when the policy does not say (7.1).
const DefaultMaxAge = 5 * time.Minute

// maxHeader bounds the header a verifier reads: 8 v1 entries and change.
const maxHeader = 1024

// maxSigs bounds the v1 entries tried, so one header costs at most
// maxSigs HMACs per key.
const maxSigs = 8

// ErrMalformed is returned by Parse for a header that is neither form.
var ErrMalformed = errors.New("usersig: malformed signature header")

// Header is a parsed signature header.
type Header struct {
	// Timestamped is set for the "t=...,v1=..." form; T and V1 are its
	// parts. Otherwise Bare is the decoded bare HMAC.
	Timestamped bool
	// T is the signing time in unix seconds (timestamped form).
	T int64
	// V1 are the decoded v1 HMACs, in header order (timestamped form; at
	// least one).
	V1 [][]byte
	// Bare is the decoded HMAC of the bare form.
	Bare []byte
}

// Parse reads a signature header. The bare form is 64 hex digits; the
// timestamped form is comma-separated name=value elements (spaces around
// them ignored) with exactly one t (decimal digits) and at least one v1
// (64 hex digits). Anything else is ErrMalformed.
func Parse(s string) (Header, error) {
	if len(s) > maxHeader {
		return Header{}, ErrMalformed
	}
	if !strings.Contains(s, "=") {
		mac, ok := decodeMAC(s)
		if !ok {
			return Header{}, ErrMalformed
		}
		return Header{Bare: mac}, nil
	}
	h := Header{Timestamped: true}
	seenT := false
	for _, el := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(el), "=")
		if !ok || !validName(name) {
			return Header{}, ErrMalformed
		}
		switch name {
		case "t":
			t, ok := parseUnix(val)
			if !ok || seenT {
				return Header{}, ErrMalformed
			}
			h.T, seenT = t, true
		case "v1":
			mac, ok := decodeMAC(val)
			if !ok || len(h.V1) == maxSigs {
				return Header{}, ErrMalformed
			}
			h.V1 = append(h.V1, mac)
		}
	}
	if !seenT || len(h.V1) == 0 {
		return Header{}, ErrMalformed
	}
	return h, nil
}

// validName reports whether an element name is 1-16 of a-z and 0-9.
func validName(s string) bool {
	if s == "" || len(s) > 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// parseUnix reads 1-19 decimal digits (no sign) as unix seconds.
func parseUnix(s string) (int64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	t, err := strconv.ParseInt(s, 10, 64)
	return t, err == nil
}

// decodeMAC decodes 64 hex digits (either case) into a SHA-256 HMAC.
func decodeMAC(s string) ([]byte, bool) {
	if len(s) != 2*sha256.Size {
		return nil, false
	}
	b, err := hex.DecodeString(s)
	return b, err == nil
}

// Options are a verifier's rules.
type Options struct {
	// MaxAge is how far t may be from now, either way (0: DefaultMaxAge).
	MaxAge time.Duration
	// RequireTimestamp refuses the bare form.
	RequireTimestamp bool
}

// Verify reports whether header is a valid signature of user by any of
// keys at time now under o. Empty keys are skipped; with none, nothing
// verifies.
func Verify(keys [][]byte, user, header string, now time.Time, o Options) bool {
	h, err := Parse(header)
	if err != nil {
		return false
	}
	if !h.Timestamped {
		if o.RequireTimestamp || ambiguous(user) {
			return false
		}
		return anyKey(keys, []byte(user), [][]byte{h.Bare})
	}
	maxAge := o.MaxAge
	if maxAge <= 0 {
		maxAge = DefaultMaxAge
	}
	// t has at most 19 digits and is not negative, so the difference
	// cannot overflow for any clock within a few centuries of 1970.
	if d := now.Unix() - h.T; d > int64(maxAge/time.Second) || -d > int64(maxAge/time.Second) {
		return false
	}
	return anyKey(keys, signed(h.T, user), h.V1)
}

// ambiguous reports whether user starts with digits and a dot: its bare
// signature, HMAC(key, user), is then also the timestamped form's signature
// of the rest of it ("<t>.<user>"), so a leaked timestamped header would
// verify as a bare one, which never expires. Such ids need the
// timestamped form.
func ambiguous(user string) bool {
	i := 0
	for i < len(user) && user[i] >= '0' && user[i] <= '9' {
		i++
	}
	return i > 0 && i < len(user) && user[i] == '.'
}

// anyKey reports whether one of macs is HMAC-SHA256(k, msg) for one of keys.
func anyKey(keys [][]byte, msg []byte, macs [][]byte) bool {
	ok := false
	for _, k := range keys {
		if len(k) == 0 {
			continue
		}
		m := hmac.New(sha256.New, k)
		m.Write(msg)
		want := m.Sum(nil)
		for _, got := range macs {
			// every comparison is made, so the time taken does not say
			// which key or entry matched
			if hmac.Equal(got, want) {
				ok = true
			}
		}
	}
	return ok
}

// signed is the timestamped form's signed message, "<t>.<user>".
func signed(t int64, user string) []byte {
	b := strconv.AppendInt(make([]byte, 0, 20+1+len(user)), t, 10)
	b = append(b, '.')
	return append(b, user...)
}

// Sign returns the timestamped signature header of user by key at time t:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(key, "<t>.<user>")>".
func Sign(key []byte, user string, t time.Time) string {
	sec := t.Unix()
	m := hmac.New(sha256.New, key)
	m.Write(signed(sec, user))
	return "t=" + strconv.FormatInt(sec, 10) + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// SignBare returns the bare (2.x) signature of user by key, which never
// expires; prefer Sign.
func SignBare(key []byte, user string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(user))
	return hex.EncodeToString(m.Sum(nil))
}
