package engine

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/policy"
)

const attestLimitPolicy = `version: 1
routes:
  - {match: "POST /v1/attest/*", class: attest}
limits:
  - {name: per-ip, by: [ip], rate: 1000/min}
risk:
  attestation:
    max_per_ip: 5/h
`

// TestAttestationMaxPerIP: of 30 concurrent attestation budgets from one
// IPv6 /64 (each from another address), exactly max_per_ip (5) are
// allowed, in either store; the rest are limited by attestation-ip. A
// budget decision takes from that limit alone (the route's were decided
// when the request arrived); any other request never takes from it, and
// another /64 has a bucket of its own.
func TestAttestationMaxPerIP(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for name, store := range attrStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEngine(t, attestLimitPolicy, store)
			decide := func(ip string, attest bool) (Outcome, string, []string) {
				in := Input{Endpoint: "POST /v1/attest/apple", IP: ip, Addr: netip.MustParseAddr(ip), Cost: 1, Now: now, AttestationBudget: attest}
				var d Decision
				if err := e.Decide(context.Background(), &in, &d); err != nil {
					t.Error(err)
					return 0, "", nil
				}
				var applied []string
				for _, l := range d.Applied() {
					applied = append(applied, l.Name)
				}
				binding := ""
				if d.Binding != nil {
					binding = d.Binding.Name
				}
				return d.Outcome, binding, applied
			}
			const n = 30
			outcomes := make([]Outcome, n)
			bindings := make([]string, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() { outcomes[i], bindings[i], _ = decide(fmt.Sprintf("2001:db8:0:1::%x", i+1), true) })
			}
			wg.Wait()
			allowed := 0
			for i, o := range outcomes {
				switch {
				case o == Allowed:
					allowed++
				case o != Limited || bindings[i] != policy.AttestationLimitName:
					t.Errorf("attestation %d: %v by %q, want Allowed or Limited by %s", i, o, bindings[i], policy.AttestationLimitName)
				}
			}
			if allowed != 5 {
				t.Errorf("%d concurrent attestations from one /64: %d allowed, want 5", n, allowed)
			}
			if o, _, applied := decide("2001:db8:0:1::ffff", false); o != Allowed || len(applied) != 1 || applied[0] != "per-ip" {
				t.Errorf("a request that attests nothing: %v with %v, want Allowed with [per-ip]", o, applied)
			}
			if o, _, applied := decide("2001:db8:0:2::1", true); o != Allowed || len(applied) != 1 || applied[0] != policy.AttestationLimitName {
				t.Errorf("an attestation from another /64: %v with %v, want Allowed with [%s] alone", o, applied, policy.AttestationLimitName)
			}
		})
	}
}

// TestAttestationMaxPerIPOff: with max_per_ip: off an attestation budget
// takes nothing: allowed with no limit.
func TestAttestationMaxPerIPOff(t *testing.T) {
	t.Parallel()
	e := newEngine(t, attestLimitPolicy[:len(attestLimitPolicy)-len("5/h\n")]+"off\n", attrStores(t)["memory"])
	for i := range 10 {
		in := Input{Endpoint: "POST /v1/attest/apple", IP: "198.51.100.7", Cost: 1, AttestationBudget: true}
		var d Decision
		if err := e.Decide(context.Background(), &in, &d); err != nil {
			t.Fatal(err)
		}
		if d.Outcome != Allowed || len(d.Applied()) != 0 {
			t.Fatalf("attestation %d with max_per_ip off: %v with %d limits, want Allowed with none", i, d.Outcome, len(d.Applied()))
		}
	}
}
