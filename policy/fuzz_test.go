package policy

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// errLine is the shape of every line of a Parse error: FILE:LINE, FILE
// the policy's name or a list file's path.
var errLine = regexp.MustCompile(`^(fuzz\.yaml|[^\n]+):\d+: `)

func FuzzParse(f *testing.F) {
	f.Add(Example())
	f.Add([]byte(contractExample))
	f.Add([]byte(head))
	f.Add([]byte(policyV2))
	f.Add([]byte(badFile))
	f.Add([]byte(""))
	f.Add([]byte("version: 1\nlimits: [\n"))
	f.Add([]byte("version: 1\nx: &a [*a]\nlimits: [{<<: *a}]\n"))
	f.Add([]byte("version: 1\nx: &a {<<: [*a, *a]}\nlimits: [*a]\n"))
	f.Add([]byte(withRisk("  velocity:\n    - {name: v, event: login_failed, by: ip, threshold: 0, window: 1m, action: tighten, duration: 1m}\n")))
	f.Add([]byte(withRisk("  reputation: {rules: [{asns: [0, 4294967296], cidrs: [x]}]}\n")))
	f.Add([]byte(head + "envoy:\n  domain: d\n  entries: {remote_address: ip, plan: attr:plan, m: endpoint_method}\n"))
	f.Add([]byte(head + "  - {name: b, by: [attr:plan, ip], rate: 1/s, if: {attr: {plan: [free, trial]}}}\nidentity: {attributes: {plan: X-Plan}}\n"))
	f.Add([]byte(head + "lists:\n  x: {file: testdata/budgets-example.md, kind: \"attr:plan\"}\nallow: [x]\ndeny: [x, y]\n"))
	f.Add([]byte(head + contractAlerting))
	f.Add([]byte(head + "alerting:\n  alertmanager: {url: \"http://u:p@a:9093/#f\", labels: {a-b: \"\", severity: x}}\n  webhooks: [{url: x, kinds: [nope]}]\n"))
	f.Add([]byte(withRisk("  attestation: {max_per_ip: 5/min}\n")))
	f.Add([]byte(withRisk("  attestation: {max_per_ip: 0.5/day}\n")))
	f.Add([]byte(withRisk("  attestation: {max_per_ip: off}\n")))
	f.Fuzz(func(t *testing.T, data []byte) {
		start := time.Now()
		p, err := Parse("fuzz.yaml", data)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("Parse took %v for %d bytes", d, len(data))
		}
		if err == nil {
			if p == nil {
				t.Fatal("nil policy and nil error")
			}
			// A valid policy answers lookups without panicking.
			for c := range p.Classes {
				for _, l := range p.Applicable(c, true) {
					p.FailureModeOf(l, c)
				}
			}
			p.Route("GET", "/x")
			if a := p.Risk.Attestation; a != nil && a.MaxPerIP != nil {
				if l := a.MaxPerIP; l.Name != AttestationLimitName || l.Rate <= 0 || l.Burst < 1 || l.Period <= 0 || len(l.By) != 1 || l.By[0] != PartIP {
					t.Fatalf("max_per_ip limit %+v", l)
				}
			}
			var b strings.Builder
			if err := p.WriteBudgets(&b); err != nil {
				t.Fatal(err)
			}
			return
		}
		if p != nil {
			t.Fatal("policy returned with an error")
		}
		for _, line := range strings.Split(err.Error(), "\n") {
			if !errLine.MatchString(line) {
				t.Fatalf("error line %q does not start with fuzz.yaml:LINE: ", line)
			}
		}
	})
}
