package middleware

import (
	"errors"
	"net/http"
	"time"

	"github.com/tollgate-dev/tollgate/client"
)

// ErrSignUser means SignUserOptions lacks Key or User.
var ErrSignUser = errors.New("middleware: SignUserOptions needs Key and User")

// SignUserOptions configures SignUser.
type SignUserOptions struct {
	// Key is the HMAC key, the value of one of the variables named by the
	// limiter's identity.user_signature_key_env (required).
	Key []byte
	// User returns the authenticated user of a request ("" when
	// anonymous), as the gateway's own authentication found it (required).
	User func(r *http.Request) string
	// UserHeader and SignatureHeader name identity.user_header and
	// identity.user_signature_header (default X-User-Id, X-User-Signature).
	UserHeader, SignatureHeader string
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// SignUser returns a middleware for a Go gateway or app server in front
// of a limiter in proxy mode (contract 7.1): it removes any user and
// signature headers the client sent (a client must not name its own
// user) and, when o.User names one, sets the user header with its
// timestamped signature, "t=<unix seconds>,v1=<hex HMAC-SHA256(key,
// "<t>.<user>")>". Wrap the handler that forwards to the limiter
// (an httputil.ReverseProxy) with it. The middleware is safe for
// concurrent use.
func SignUser(o SignUserOptions) (func(http.Handler) http.Handler, error) {
	if len(o.Key) == 0 || o.User == nil {
		return nil, ErrSignUser
	}
	s := &client.UserSigner{Key: o.Key, UserHeader: o.UserHeader, SignatureHeader: o.SignatureHeader, Now: o.Now}
	uh, sh := o.UserHeader, o.SignatureHeader
	if uh == "" {
		uh = client.DefaultUserHeader
	}
	if sh == "" {
		sh = client.DefaultUserSignatureHeader
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for k := range r.Header {
				// every spelling an upstream reads as the same header
				if sameName(k, uh) || sameName(k, sh) {
					delete(r.Header, k)
				}
			}
			if user := o.User(r); user != "" {
				s.Sign(r.Header, user)
			}
			next.ServeHTTP(w, r)
		})
	}, nil
}

// sameName reports whether two header names are one to an upstream:
// equal ignoring case, with '_' and '-' alike (as CGI and Rack read them).
func sameName(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if fold(a[i]) != fold(b[i]) {
			return false
		}
	}
	return true
}

// fold lower-cases an ASCII letter and reads '_' as '-'.
func fold(c byte) byte {
	switch {
	case c == '_':
		return '-'
	case c >= 'A' && c <= 'Z':
		return c + 'a' - 'A'
	}
	return c
}
