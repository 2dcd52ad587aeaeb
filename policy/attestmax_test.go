package policy

import (
	"testing"
	"time"
)

func TestAttestationMaxPerIP(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		yaml   string
		rate   float64 // 0: no limit
		period time.Duration
		burst  float64
		text   string
		line   int
	}{
		{"default", withRisk("  attestation:\n    valid_for: 1h\n"), DefaultAttestationMaxPerIP, time.Hour, DefaultAttestationMaxPerIP, "120/h", 8},
		{"per minute", withRisk("  attestation:\n    max_per_ip: 5/min\n"), 5, time.Minute, 5, "5/min", 8},
		{"a fraction holds one", withRisk("  attestation:\n    max_per_ip: 0.5/day\n"), 0.5, 24 * time.Hour, 1, "0.5/day", 8},
		{"off", withRisk("  attestation:\n    max_per_ip: off\n"), 0, 0, 0, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := Parse("p.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			l := p.Risk.Attestation.MaxPerIP
			if tc.rate == 0 {
				if l != nil {
					t.Fatalf("MaxPerIP = %+v, want nil", l)
				}
				return
			}
			if l == nil || l.Name != AttestationLimitName || l.Index != -1 || len(l.By) != 1 || l.By[0] != PartIP || l.Kind != KindBucket ||
				l.Rate != tc.rate || l.Period != tc.period || l.Burst != tc.burst || l.RateText != tc.text || l.Line != tc.line {
				t.Fatalf("MaxPerIP = %+v, want %s: %g per %v, burst %g, line %d", l, AttestationLimitName, tc.rate, tc.period, tc.burst, tc.line)
			}
			for c := range p.Classes {
				for _, auth := range []bool{false, true} {
					for _, a := range p.Applicable(c, auth) {
						if a == l {
							t.Fatalf("MaxPerIP is applicable to class %s: it applies to attestations only", p.Classes[c])
						}
					}
				}
			}
		})
	}
}
