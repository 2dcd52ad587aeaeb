package policy

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func TestWriteBudgetsGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy func(t *testing.T) *Policy
	}{
		{"example", func(t *testing.T) *Policy { return Default() }},
		{"no-routes", func(t *testing.T) *Policy {
			p, err := Parse("no-routes.yaml", []byte(`version: 1
limits:
  - {name: per-ip, by: [ip], rate: 0.5/s, burst: 5}
  - {name: trial, by: [device, route], rate: 10/hour, shadow: true, failure_mode: closed}
  - {name: users, by: [user], rate: 100/min, if: {authenticated: true}}
`))
			if err != nil {
				t.Fatal(err)
			}
			return p
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			if err := tt.policy(t).WriteBudgets(&buf); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "budgets-"+tt.name+".md")
			if *update {
				if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("WriteBudgets output differs from %s:\n%s", golden, buf.Bytes())
			}
		})
	}
}

func TestWriteBudgetsHandBuilt(t *testing.T) {
	t.Parallel()
	p := &Policy{
		Classes: []string{DefaultClass},
		Limits: []Limit{{Name: "x|y", By: []KeyPart{PartIP, PartASN}, Rate: 2, Period: 60e9, Burst: 3},
			{Name: "daily", By: []KeyPart{PartUser}, Rate: 50, Period: 24 * 3600e9, Burst: 50}},
	}
	var buf bytes.Buffer
	if err := p.WriteBudgets(&buf); err != nil {
		t.Fatal(err)
	}
	want := "| default | x\\|y | ip + asn | 2/min | 3 | open |\n| default | daily | user | 50/day | 50 | open |\n"
	if !bytes.HasSuffix(buf.Bytes(), []byte(want)) {
		t.Errorf("output:\n%s\nwant it to end with\n%s", buf.Bytes(), want)
	}
}
