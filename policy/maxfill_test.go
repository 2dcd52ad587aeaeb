package policy

import (
	"strings"
	"testing"
)

// TestMaxFill: a bucket that would take more than 100 years to fill from
// empty is refused at its rate's line (its Redis expiry could overflow
// and fail every decision of a batch); 100 years is allowed.
func TestMaxFill(t *testing.T) {
	t.Parallel()
	for src, want := range map[string]string{
		"  - {name: x, by: [ip], rate: 0.001/day, burst: 1000000000}\n": "p.yaml:3: rate 0.001/day with burst 1e+09: an empty bucket would take 2.74e+09 years to fill, more than 100",
		"  - {name: x, by: [ip], rate: 0.00000000001/day}\n":            "p.yaml:3: rate 0.00000000001/day with burst 1: an empty bucket would take 2.74e+08 years to fill",
		"  - {name: x, by: [ip], rate: 1/day, burst: 36500}\n":          "",
		"  - {name: x, by: [ip], rate: 1/day, burst: 36501}\n":          "more than 100",
		"  - {name: x, by: [ip], rate: 1000000000/s}\n":                 "",
	} {
		_, err := Parse("p.yaml", []byte("version: 1\nlimits:\n"+src))
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", src, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: error %v, want %q", src, err, want)
		}
	}
}
