package attack

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/attestation/attestationtest"
	"github.com/tollgate-dev/tollgate/policy"
)

// Attack: one genuine iPhone generates as many App Attest keys as it
// likes (DCAppAttestService.generateKey is per call, not per phone), and
// a Play Integrity verdict is per request: one attacker with one phone
// mints attested device ids by the thousand, each with a device token,
// so a fresh verified budget (verified_multiplier, its own device
// buckets), and rotates through them. The attestation endpoints were
// bounded only by the policy's generic per-IP limits (ip-unauth, 60
// requests a minute: 30 ids a minute, 43,200 a day from one address):
// all 25 attestations one address sent at once were verified.
// Defence: risk.attestation.max_per_ip (here 20/hour), a bucket per
// client address (/64 for IPv6) that every attestation
// (POST /v1/attest/apple, /v1/attest/android) takes from, decided by the
// engine in the bucket store with the request's other limits: of 25
// concurrent attestations exactly 20 pass, the rest get 429 RATE_LIMITED
// naming the limit attestation-ip, with Retry-After, counted in
// tollgate_decisions_total; another address is not affected.
func TestAttackOnePhoneMintsAttestedDeviceIDs(t *testing.T) {
	t.Parallel()
	const attacker, perIP, n = "198.51.100.77", 20, 25
	ca := attestationtest.NewCA(t, time.Now())
	tg := start(t, withAppleAnd(t, ca, "    max_per_ip: "+strconv.Itoa(perIP)+"/h\n"))
	bodies := make([]string, n)
	for i := range n {
		device := fmt.Sprintf("minted-%d", i)
		code, ch := attestPost(t, tg, "challenge", attacker, `{"device_id":"`+device+`"}`)
		if code != http.StatusOK || ch.Challenge == "" {
			t.Fatalf("challenge %d: %d %+v", i, code, ch)
		}
		sum := sha256.Sum256([]byte(ch.Challenge))
		att := ca.Attest(t, attestationtest.Options{AppID: audit3AppID, ClientDataHash: sum[:]}) // a new key each time
		bodies[i] = appleJSON(device, ch.Challenge, att.KeyID, att.Object)
	}
	type answer struct {
		code       int
		retryAfter string
		body       string
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, h, body := doH(t, "POST", tg.public+"/v1/attest/apple", bodies[i], from(attacker))
			answers[i] = answer{c, h.Get("Retry-After"), body}
		})
	}
	wg.Wait()
	verified, limited := 0, 0
	for i, a := range answers {
		switch {
		case a.code == http.StatusOK && strings.Contains(a.body, `"device_token":"dt1.`):
			verified++
		case a.code == http.StatusTooManyRequests && code(a.body) == "RATE_LIMITED" &&
			strings.Contains(a.body, `"limit":"`+policy.AttestationLimitName+`"`) && a.retryAfter != "":
			limited++
		default:
			t.Errorf("attestation %d: %d (Retry-After %q) %s", i, a.code, a.retryAfter, a.body)
		}
	}
	if want := perIP; verified != want || limited != n-want {
		t.Fatalf("one address attested %d device ids at once: %d verified, %d limited; want %d verified, %d limited", n, verified, limited, want, n-want)
	}
	// a phone at another address attests as before
	if _, code, a := appleAttest(t, tg, ca, "someone-elses-phone", attestationtest.Options{}); code != http.StatusOK || a.DeviceToken == "" {
		t.Fatalf("another address's attestation: %d %+v", code, a)
	}
	// the denials are counted, by the limit's name
	_, metrics := do(t, "GET", tg.api+"/metrics", "", nil)
	for _, want := range []string{
		fmt.Sprintf(`tollgate_decisions_total{class="write",limit="%s",result="limited"} %d`, policy.AttestationLimitName, n-perIP),
		fmt.Sprintf(`tollgate_decisions_total{class="write",limit="%s",result="allowed"} %d`, policy.AttestationLimitName, perIP+1),
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
