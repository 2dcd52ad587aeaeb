// Package rls is Envoy's external rate-limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, contract
// 6.10) in front of the limiter's check path.
//
// Envoy sends, per HTTP request, one RateLimitRequest: a domain and a list
// of descriptors, each a list of (key, value) entries produced by the
// route's rate_limits actions. Tollgate does not count descriptors one by
// one as envoyproxy/ratelimit does. The policy's `envoy.entries` maps
// entry keys to request fields (ip, user, device, account, the endpoint's
// method and path, attributes), all entries of all descriptors together
// form ONE request, and that request is decided once through the same code
// path as POST /v1/check (api.Server.Decide): every limit whose conditions
// match applies, all-or-nothing, with multipliers, lockouts, step-up,
// lists and failure modes, and the same decision events and metrics.
//
// The answer is OK or OVER_LIMIT overall; every descriptor's status
// carries the same binding limit (its effective burst as requests per
// unit, its remaining tokens and the time until it is full). The
// rate-limit headers of the check API go in response_headers_to_add, and
// a denial's envelope in raw_body, so Envoy's local reply is what
// /v1/check would have answered.
//
// A request whose entries cannot be mapped (an id over 256 bytes, a
// control character, bad UTF-8, two values of one field that disagree, a
// request over the bounds) is denied: OVER_LIMIT with the 400 BAD_REQUEST
// envelope naming the entry, as /v1/check refuses it. Most
// entry values are the client's own headers, and a gRPC error would be
// answered by Envoy's failure_mode_deny, false in the documented
// configuration: one oversized X-Device-Id would escape every limit.
package rls
