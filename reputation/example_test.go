package reputation_test

import (
	"fmt"
	"log"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/reputation"
	"github.com/tollgate-dev/tollgate/reputation/reputationtest"
)

func Example() {
	dir, err := os.MkdirTemp("", "reputation-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "GeoLite2-ASN.mmdb")
	if err := reputationtest.WriteTestDB(path, reputationtest.StandardEntries()); err != nil {
		log.Fatal(err)
	}
	db, err := reputation.OpenDB(path)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	rules := reputation.New(&policy.Reputation{Rules: []policy.ReputationRule{
		{ASNs: []uint32{16509, 14061}, Multiplier: 0.25, Reason: "datacenter"},
		{CIDRs: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}, Multiplier: 0.1, Reason: "vpn-farm"},
	}}, db)
	for _, ip := range []string{"203.0.113.7", "198.51.100.9", "192.0.2.1"} {
		res := rules.Lookup(netip.MustParseAddr(ip))
		fmt.Printf("%s AS%d %q: ip %v (%s), asn %v (%s)\n",
			ip, res.ASN, res.Org, res.IP, res.IPReason, res.ASNMult, res.ASNReason)
	}
	// Output:
	// 203.0.113.7 AS16509 "AMAZON-02": ip 0.1 (vpn-farm), asn 0.25 (datacenter)
	// 198.51.100.9 AS14061 "DIGITALOCEAN": ip 0.25 (datacenter), asn 0.25 (datacenter)
	// 192.0.2.1 AS0 "": ip 1 (), asn 1 ()
}
