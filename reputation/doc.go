// Package reputation turns where a request comes from into multipliers: the
// policy's `risk.reputation` rules, matched against the client IP and the
// IP's autonomous system (AS) number from a MaxMind GeoLite2-ASN database.
//
// # Ideas
//
// A reputation rule names AS numbers, CIDRs or both, and a multiplier. The
// contract attaches every matching rule to the request's ip subject, and
// ASN rules also to its asn subject, so a limit keyed by ip is scaled by
// both kinds of rule and a limit keyed by asn only by ASN rules. A rule that
// names both matches when either matches; through its CIDRs it reaches only
// the ip subject. Several matching rules combine by the penalty rule of
// bucket.Combine: if any is below 1 the lowest applies, otherwise the
// highest. Result carries the multiplier of each subject and the rule that
// decided it.
//
// Rules are compiled once per policy by New into structures that answer
// without allocating: a map from AS number to the combined multiplier of
// the ASN rules naming it, and, per address family, a sorted table of
// disjoint address ranges, each with the combined multiplier of the CIDRs
// covering it (CIDRs are nested or disjoint, so one sweep with a stack
// builds it); a lookup is one binary search.
//
// # The database
//
// DB wraps a GeoLite2-ASN (or GeoIP2-ISP) database read into memory, never
// memory-mapped: a replaced reader is simply dropped and reclaimed by the
// garbage collector once no lookup holds it, so a hot swap can never unmap
// pages a concurrent lookup is reading. Reload re-reads the file when its
// identity, size or modification time changed, verifies it fully, and swaps
// it in atomically; a file that fails verification is refused and the old
// data stays. Decoded records are cached per reader by their data offset,
// so lookups of known networks allocate nothing.
//
// Without a database, ASN rules cannot match: Rules.Inactive lists them
// (the limiter logs them as inactive) while CIDR rules still apply.
//
// # Tests
//
// The subpackage reputationtest writes GeoLite2-ASN-format test databases
// (WriteTestDB), for this package's tests and for other packages'. The
// committed test database testdata/mmdb/GeoLite2-ASN-test.mmdb holds
// reputationtest.StandardEntries and is regenerated with go generate.
package reputation

//go:generate go run ./internal/gentestdb -o ../testdata/mmdb/GeoLite2-ASN-test.mmdb
