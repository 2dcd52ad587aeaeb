package client

import (
	"net/http"
	"time"

	"github.com/tollgate-dev/tollgate/internal/usersig"
)

// Default header names of the signed user header (the example policy's
// identity section).
const (
	DefaultUserHeader          = "X-User-Id"
	DefaultUserSignatureHeader = "X-User-Signature"
)

// SignUser returns the timestamped signature of user by key at time t,
// the value of the signature header (contract 7.1):
// "t=<unix seconds>,v1=<hex HMAC-SHA256(key, "<t>.<user>")>". Tollgate
// takes it while t is within identity.user_signature_max_age (default 5m)
// of its clock, so a leaked header stops working within minutes.
func SignUser(key []byte, user string, t time.Time) string {
	return usersig.Sign(key, user, t)
}

// UserSigner puts a signed user header on requests that a trusted server
// (an app server or gateway holding the key) sends through a limiter in
// proxy mode. Sign it per request: a signature is valid for minutes only.
// Its zero value signs with the default header names, an empty key and
// the wall clock; set Key. It is safe for concurrent use once set up.
type UserSigner struct {
	// Key is the HMAC key, the value of one of the variables named by
	// identity.user_signature_key_env.
	Key []byte
	// UserHeader and SignatureHeader name identity.user_header and
	// identity.user_signature_header (default X-User-Id, X-User-Signature).
	UserHeader, SignatureHeader string
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Sign sets h's user header to user and its signature header to user's
// timestamped signature, replacing any value of either.
func (s *UserSigner) Sign(h http.Header, user string) {
	uh, sh := s.UserHeader, s.SignatureHeader
	if uh == "" {
		uh = DefaultUserHeader
	}
	if sh == "" {
		sh = DefaultUserSignatureHeader
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	h.Set(uh, user)
	h.Set(sh, usersig.Sign(s.Key, user, now()))
}
