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
package engine
