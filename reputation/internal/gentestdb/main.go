// Command gentestdb writes the committed test database
// testdata/mmdb/GeoLite2-ASN-test.mmdb from reputationtest.StandardEntries.
// Run it through go generate in package reputation:
//
//	go generate ./reputation/
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/tollgate-dev/tollgate/reputation/reputationtest"
)

func main() {
	out := flag.String("o", "testdata/mmdb/GeoLite2-ASN-test.mmdb", "output file")
	flag.Parse()
	if err := reputationtest.WriteTestDB(*out, reputationtest.StandardEntries()); err != nil {
		fmt.Fprintln(os.Stderr, "gentestdb:", err)
		os.Exit(1)
	}
}
