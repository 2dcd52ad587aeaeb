// Package attack is Tollgate's attack suite: each test is one attack an
// outsider tried against a limiter in proxy mode (issue 9), run against a
// real limiter (real Redis, real NATS and riskd, an upstream that decodes
// JSON the way Go's encoding/json does), and asserts that it fails. Read
// the tests as the documentation of what Tollgate defends; the clauses of
// CONTRACT.md section 6 they hold to are named in each.
//
// The package has no code of its own.
package attack
