// Package engine turns a request into a decision: it matches the policy
// (allow and deny lists, route class, applicable limits, attribute
// conditions), builds the bucket keys and multiplier
// subjects, asks the bucket store once, and applies the failure mode when
// the store cannot answer. It knows nothing of HTTP; api/ and middleware
// call it.
//
// The binding limit of a decision is the limit that denied it (the longest
// wait if several did), else the non-shadow limit with the fewest remaining
// tokens relative to its effective burst.
//
// Where to read, by concern:
//   - decision.go: what a caller passes (Input) and gets (Decision, Outcome);
//   - engine.go: Options, New and the pipeline (Decide: lists, route,
//     reputation, attestation, then one store call or the failure mode);
//   - keys.go: the limits that apply and their bucket keys and subjects;
//   - lists.go: allow and deny lists; locks.go, claims.go, trusted.go:
//     lock keys, claimed device ids, trusted-device budgets;
//   - l1.go, l1path.go, l1store.go, l1subjects.go: the in-process L1 cache
//     of refused keys and known multipliers;
//   - outcome.go, metrics.go: concluding a decision (binding limit, retry)
//     and recording it; breaker.go: the store's circuit breaker;
//   - lease.go: concurrency leases and their release.
package engine
