package policy

import (
	"bytes"
	"strings"
	"testing"
)

func TestDefault(t *testing.T) {
	t.Parallel()
	// Parse the embedded file directly, so that a broken example fails here
	// with its FILE:LINE errors rather than as a panic elsewhere.
	if _, err := Parse("example.yaml", Example()); err != nil {
		t.Fatalf("embedded example is invalid:\n%v", err)
	}
	p := Default()
	if p.Source != "" {
		t.Errorf("Source = %q, want \"\"", p.Source)
	}
	if p != Default() {
		t.Errorf("Default returns a new policy each time")
	}
	if len(p.Limits) != 9 || len(p.Routes) != 5 || len(p.Risk.Velocity) != 2 || p.Risk.Anomaly == nil {
		t.Errorf("example incomplete: %d limits, %d routes, %+v", len(p.Limits), len(p.Routes), p.Risk)
	}
	if p.Risk.Reputation.ASNDatabase != "" || p.Risk.Attestation.Apple != nil || p.Risk.Attestation.Android != nil {
		t.Errorf("example must not name operator files: %+v %+v", p.Risk.Reputation, p.Risk.Attestation)
	}
	if !p.Risk.Attestation.UnverifiedSet || p.Risk.Attestation.VerifiedMultiplier != 2 {
		t.Errorf("attestation = %+v", p.Risk.Attestation)
	}
	e := Example()
	e[0] = 'X'
	if Example()[0] == 'X' {
		t.Errorf("Example returns the embedded slice itself")
	}
}

// TestExampleFollowsContract checks that the embedded example is the
// contract's, less the operator-supplied parts.
func TestExampleFollowsContract(t *testing.T) {
	t.Parallel()
	strip := func(text string) []string {
		var out []string
		skip := false
		for _, line := range strings.Split(text, "\n") {
			trimmed := strings.TrimSpace(line)
			switch {
			case strings.HasPrefix(trimmed, "#"), trimmed == "":
				continue
			case strings.HasPrefix(trimmed, "asn_database:"):
				continue
			case strings.HasPrefix(trimmed, "apple:"), strings.HasPrefix(trimmed, "android:"):
				skip = true
				continue
			case skip && !strings.HasSuffix(trimmed, "}"):
				continue
			case skip:
				skip = false
				continue
			}
			out = append(out, line)
		}
		return out
	}
	got := strip(string(bytes.TrimSpace(Example())))
	// 7.1 amends the example: login-account gives trusted devices their own budget
	amended := strings.Replace(contractExample, "rate: 5/min,   if: {class: auth}}",
		"rate: 5/min,   if: {class: auth},\n     trusted_devices: own}", 1)
	want := strip(strings.TrimSpace(amended))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("example.yaml drifted from the contract:\n%s\n---- want ----\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
