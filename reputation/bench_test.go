package reputation_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/reputation"
	"github.com/tollgate-dev/tollgate/reputation/reputationtest"
)

// benchRules returns the standard database's rules for benchmarks: 20
// CIDR rules (IPv4 and IPv6, some nested) plus the contract's ASN rules.
func benchRules(t testing.TB) (*reputation.Rules, []netip.Addr) {
	t.Helper()
	db, _ := openDB(t, reputationtest.StandardEntries())
	rep := contractRules()
	for i := range 16 {
		rep.Rules = append(rep.Rules, policy.ReputationRule{
			CIDRs:      prefixes(fmt.Sprintf("100.%d.0.0/16", 64+i), fmt.Sprintf("100.%d.7.0/24", 64+i)),
			Multiplier: 0.5, Reason: fmt.Sprintf("cgnat-%d", i),
		})
	}
	for i := range 4 {
		rep.Rules = append(rep.Rules, policy.ReputationRule{
			CIDRs:      prefixes(fmt.Sprintf("2001:db8:%x::/48", 0x100+i)),
			Multiplier: 2, Reason: fmt.Sprintf("partner-v6-%d", i),
		})
	}
	ips := []netip.Addr{
		netip.MustParseAddr("203.0.113.7"),   // CIDR and ASN
		netip.MustParseAddr("198.51.100.9"),  // ASN
		netip.MustParseAddr("192.0.2.1"),     // nothing
		netip.MustParseAddr("10.1.2.3"),      // ASN, no rule
		netip.MustParseAddr("100.70.7.1"),    // nested CIDRs
		netip.MustParseAddr("2001:db8:1::1"), // IPv6 ASN
		netip.MustParseAddr("2001:db8:101::1"),
		netip.MustParseAddr("2001:db9::1"),
	}
	return reputation.New(rep, db), ips
}

// TestLookupDoesNotAllocate checks the hot path's promise: once each
// database record has been seen, lookups allocate nothing.
//
// Not parallel: testing.AllocsPerRun refuses to run in a parallel test.
func TestLookupDoesNotAllocate(t *testing.T) {
	r, ips := benchRules(t)
	for _, ip := range ips {
		r.Lookup(ip) // warm the record cache
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, ip := range ips {
			r.Lookup(ip)
		}
	})
	if allocs != 0 {
		t.Errorf("Lookup allocates %.1f times per %d lookups, want 0", allocs, len(ips))
	}
}

// BenchmarkLookup is Rules.Lookup with a database, 20 CIDR rules and the
// ASN rules, over a mix of addresses.
func BenchmarkLookup(b *testing.B) {
	r, ips := benchRules(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r.Lookup(ips[i%len(ips)])
		i++
	}
}

// BenchmarkLookupParallel is BenchmarkLookup from all Ps at once.
func BenchmarkLookupParallel(b *testing.B) {
	r, ips := benchRules(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			r.Lookup(ips[i%len(ips)])
			i++
		}
	})
}

// BenchmarkDBLookup is DB.Lookup alone.
func BenchmarkDBLookup(b *testing.B) {
	db, _ := openDB(b, reputationtest.StandardEntries())
	ip := netip.MustParseAddr("203.0.113.7")
	b.ReportAllocs()
	for b.Loop() {
		db.Lookup(ip)
	}
}

// BenchmarkReload is a full reload: read, verify and swap the file.
func BenchmarkReload(b *testing.B) {
	db, path := openDB(b, reputationtest.StandardEntries())
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		touch(b, path, i%2)
		if changed, err := db.Reload(); !changed || err != nil {
			b.Fatalf("Reload = %v, %v", changed, err)
		}
	}
}
