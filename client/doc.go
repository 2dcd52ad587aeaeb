// Package client is the Go side of the cooperation Tollgate asks of its
// callers: an http.RoundTripper that, on 429 (and 503), waits as long as
// the server said plus a random full-jitter backoff, retries a bounded
// number of times, and never retries before the server's time.
//
// The server's time comes from the error envelope's
// error.details.retry_after_ms (exact, in milliseconds) or, when the body
// does not carry it, from the Retry-After header (whole seconds or an HTTP
// date). The wait before retry n (n = 0 for the first retry) is
//
//	server time + rand[0,1) * min(MaxDelay, BaseDelay * 2^n)
//
// (the jitter alone when the server named no time), so a crowd of clients
// told "1800 ms" spreads out after 1800 ms instead of stampeding back at
// the same instant, and clients that were told nothing still back off
// exponentially.
//
// A 429 whose envelope code is ACCOUNT_LOCKED is never retried, however
// short the lockout left: the app should tell the user (docs/clients.md,
// rule 6), and a login retried once the lock ends would count another
// failure against the account.
//
// Only requests that can be sent again are retried: idempotent methods
// (GET, HEAD, OPTIONS, PUT, DELETE) or any request with an Idempotency-Key
// header, and only when the body can be replayed (no body, or
// http.Request.GetBody set, which http.NewRequest does for bytes.Buffer,
// bytes.Reader and strings.Reader bodies). Everything else passes through
// untouched.
//
// UserSigner and SignUser are the other half for a trusted server (an app
// server or gateway holding the key) in front of a limiter in proxy mode:
// they put the timestamped, signed user header on the requests it sends
// (contract 7.1).
//
// See docs/clients.md for the same pattern in Swift and Kotlin.
package client
