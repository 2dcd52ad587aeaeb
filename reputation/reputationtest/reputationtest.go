// Package reputationtest writes small GeoLite2-ASN-format databases for
// tests, in the spirit of net/http/httptest. It lives apart from package
// reputation so that the database writer is linked into test binaries only.
package reputationtest

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
)

// BuildEpoch is the build time (Unix seconds, 2024-01-01T00:00:00Z) that
// WriteTestDB stamps on every database, so that the same entries always
// give the same bytes.
const BuildEpoch = 1704067200

// TestEntry is one network of a test database.
type TestEntry struct {
	// Prefix is the network; IPv4 and IPv6 prefixes may be mixed, and
	// reserved ranges (documentation, private) are allowed. A later entry
	// overrides an earlier one where they overlap.
	Prefix netip.Prefix
	// ASN is the autonomous_system_number recorded (0: none).
	ASN uint32
	// Org is the autonomous_system_organization recorded ("": none).
	Org string
}

// StandardEntries returns the networks of the committed test database
// testdata/mmdb/GeoLite2-ASN-test.mmdb, which only use ranges reserved for
// documentation and private use:
//
//	203.0.113.0/25    AS16509 AMAZON-02     (203.0.113.128/25 has no record)
//	198.51.100.0/24   AS14061 DIGITALOCEAN
//	10.0.0.0/8        AS64512 PRIVATE-TEST
//	2001:db8::/32     AS64496 EXAMPLE-V6
//	2001:db8:1::/48   AS16509 AMAZON-02
//
// 192.0.2.0/24 is deliberately absent. The slice is a fresh copy.
func StandardEntries() []TestEntry {
	return []TestEntry{
		{Prefix: netip.MustParsePrefix("203.0.113.0/25"), ASN: 16509, Org: "AMAZON-02"},
		{Prefix: netip.MustParsePrefix("198.51.100.0/24"), ASN: 14061, Org: "DIGITALOCEAN"},
		{Prefix: netip.MustParsePrefix("10.0.0.0/8"), ASN: 64512, Org: "PRIVATE-TEST"},
		{Prefix: netip.MustParsePrefix("2001:db8::/32"), ASN: 64496, Org: "EXAMPLE-V6"},
		{Prefix: netip.MustParsePrefix("2001:db8:1::/48"), ASN: 16509, Org: "AMAZON-02"},
	}
}

// WriteTestDB writes a GeoLite2-ASN database (IPv6 tree with IPv4 aliased,
// reserved networks included, record size 24) holding entries to path.
// It writes a temporary file beside path and renames it over path, as
// geoipupdate does, so a reader never sees a partial file.
func WriteTestDB(path string, entries []TestEntry) error {
	tree, err := mmdbwriter.New(mmdbwriter.Options{
		DatabaseType:            "GeoLite2-ASN",
		Description:             map[string]string{"en": "Tollgate test GeoLite2-ASN database"},
		Languages:               []string{"en"},
		IncludeReservedNetworks: true,
		RecordSize:              24,
		BuildEpoch:              BuildEpoch,
	})
	if err != nil {
		return fmt.Errorf("reputationtest: new tree: %w", err)
	}
	for _, e := range entries {
		if !e.Prefix.IsValid() {
			return fmt.Errorf("reputationtest: entry AS%d %q: invalid prefix", e.ASN, e.Org)
		}
		p := e.Prefix.Masked()
		rec := mmdbtype.Map{}
		if e.ASN != 0 {
			rec["autonomous_system_number"] = mmdbtype.Uint32(e.ASN)
		}
		if e.Org != "" {
			rec["autonomous_system_organization"] = mmdbtype.String(e.Org)
		}
		n := &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
		if err := tree.Insert(n, rec); err != nil {
			return fmt.Errorf("reputationtest: insert %s AS%d: %w", p, e.ASN, err)
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("reputationtest: write %s: %w", path, err)
	}
	_, werr := tree.WriteTo(tmp)
	merr := tmp.Chmod(0o644)
	cerr := tmp.Close()
	if err := errors.Join(werr, merr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("reputationtest: write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("reputationtest: rename %s: %w", path, err)
	}
	return nil
}
