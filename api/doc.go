// Package api is the HTTP face of the limiter. Server serves the API
// listener and, in proxy mode, the public one (Public). It holds:
//
//   - the check API: POST /v1/check decoded without reflection
//     (decode.go, internal/jsonscan) and answered by hand-written JSON
//     (check.go), and POST /v1/release, which frees a concurrency lease
//     (release.go);
//   - reports: POST /v1/report, published for riskd (report.go);
//   - forward auth: GET and POST /v1/forward-auth, for gateways that ask
//     before they forward (forwardauth.go), and RenderDecision, for
//     gateways that relay the answer in their own protocol (package rls);
//   - the reverse proxy of proxy mode (EnableProxy): the identity read
//     from a request's headers and signed user header (identity.go), the
//     client's address behind trusted proxies (remoteip.go), the decision,
//     and the forwarding and streaming of the upstream's answer over
//     net/http's Transport with the proxy's deadlines (proxy.go,
//     stream.go, NewUpstreamTransport);
//   - attestation: the challenge, App Attest and Play Integrity endpoints
//     under /v1/attest/ that issue device tokens (attest.go,
//     NewAttestHandler);
//   - the admin API under /v1/admin/: multipliers, lockouts, subjects,
//     offenders, the audit trail and the recent alerts, every change
//     published to the audit trail (admin.go, admin_record.go, ipkey.go,
//     trail.go);
//   - the console's sign-in check of the admin token (console.go; the
//     console itself is package console);
//   - /healthz, /readyz and /metrics (server.go);
//   - the error codes (envelope.go), the rate-limit header names
//     (headers.go) and WriteDecision, which the proxy, forward auth and
//     package middleware use so that every denial looks the same; the
//     envelope and the headers are written by internal/render, which
//     package rls renders through too.
//
// Every response carries a request id, and no input, however malformed,
// produces a 5xx or a crash (the fuzz tests).
package api
