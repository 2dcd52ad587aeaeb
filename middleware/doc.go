// Package middleware puts Tollgate in front of a Go net/http API as an
// ordinary middleware, for services that would rather not run the
// limiter as a reverse proxy.
//
// It works in one of two modes:
//
//   - Direct: the middleware decides in process with an *engine.Engine
//     (over a bucket store: the memory store for one replica, Redis for
//     many) and answers exactly as the limiter's check API does: same
//     envelope, same X-RateLimit-*, RateLimit, RateLimit-Policy and
//     Retry-After headers.
//   - Remote: the middleware asks a running limiter (POST /v1/check) and
//     relays its answer. When the limiter cannot be reached within
//     Options.Timeout, Options.FailOpen decides: pass with
//     X-RateLimit-Degraded: 1, or answer 503 LIMITER_UNAVAILABLE; a request
//     naming an account (a login) fails closed unless
//     Options.FailOpenAccounts is set. A 400
//     from the limiter is the caller's bad input, answered 400 whatever
//     FailOpen says.
//
// Who is calling is the application's business: Options.Identify returns
// the caller's IP, user, device and account. RemoteIP builds the IP part
// safely from the peer address and X-Forwarded-For.
//
// The endpoint checked is the request's method, a space and its path
// ("GET /v1/items/42"), which the policy's routes match. A path with a
// space or control character is sent percent-encoded, a path that does not
// start with "/" (OPTIONS *) gets one. A request whose endpoint is longer
// than the limiter's 2048 bytes is refused (400 BAD_REQUEST), as in proxy
// mode: the cut path could match another route than the one its handler
// serves (Endpoint still returns the cut form).
//
// Every limited request's response carries X-Request-Id: the incoming one
// when it is of a sane form, else a new ULID. Remote mode sends it to the
// limiter, so the envelope, the header and the limiter's events agree; a
// handler can read it from w.Header().
package middleware
