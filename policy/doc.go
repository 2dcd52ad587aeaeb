// Package policy reads, validates and serves Tollgate's policy file: which
// requests belong to which route class, which limits apply to them, what
// happens when the store is down, and how the risk engine reacts to abuse.
//
// # From file to Policy
//
// Parse (and Load, for a file on disk) walks the YAML node tree itself
// rather than decoding into structs, so that every problem is reported as
// "FILE:LINE: what is wrong" with the line of the offending value, unknown
// fields and duplicate keys included. All problems are collected, not only
// the first; each is an *Error, and they come back joined with errors.Join,
// sorted by line. Files the policy names (the ASN database, Apple's root CA)
// must exist; relative names resolve against the policy file's directory.
//
// What the user wrote is kept apart from what runs: Parse turns rates into
// tokens per period, durations into time.Duration, CIDRs into masked
// netip.Prefix values, and precomputes the lookups the request path needs.
// A *Policy is immutable after Parse and safe for concurrent use.
//
// # Matching a request
//
// Route finds a request's class: the first route whose method and path glob
// match wins (`*` in a path matches any run of characters, `/` included);
// a request that matches no route has class "default". Applicable then
// returns every limit whose `if` matches the class and the authentication
// state, in file order: all of them apply, and the request passes only if
// each allows it. Both run without allocating.
//
// The rules a request's parts must meet are here too, so that every way
// in (the check API, the Envoy rate-limit service, the Go middleware)
// applies the same ones: CheckID, MaxIDLen, MaxEndpointLen and MaxCost
// for its identity, endpoint and cost, CheckAttribute and MaxAttributes
// for its attributes, NormalizeAccount for its account.
//
// # Running policy
//
// A Holder keeps the policy in force behind an atomic pointer. Reload (on
// SIGHUP) and Watch (polling the file) swap in a new policy only if the new
// file is valid; otherwise the old one stays and the error is logged and
// handed to OnReload for metrics.
//
// Default returns the built-in example policy (Example is its text), used
// when no policy file is given. WriteBudgets prints a policy as the Markdown
// table `limiter budgets` shows to mobile teams.
package policy
