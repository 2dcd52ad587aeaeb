// Package api is the HTTP face of the limiter: POST /v1/check, the admin
// API, health, readiness and metrics. Every error leaves through one
// envelope (see writeError), every response carries a request id, and no
// input, however malformed, produces a 5xx or a crash.
package api
