package attack

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// Attack: the victim's account holds a letter that Unicode has in a
// precomposed form only in lower case ("ǰ", U+01F0: likewise ẖ, ẗ, ẘ,
// ẙ): the attacker guesses as "J\u030cane", a capital J and a combining
// caron, which is the same account (6.4). The limiter took NFC and then
// lower-cased, giving "j\u030cane", which is not NFC; riskd normalised
// the account it was told of once more, to "ǰane", so it counted the
// failures and set the lockout under "ǰane", while the limiter looked
// for a lockout of "j\u030cane": the attacker guessed on, never locked
// out (and spent the real account's budget in a bucket of his own).
// Defence (6.4): the canonical form is NFC after lower-casing too, so
// every spelling is one key and normalising it again changes nothing.
func TestAttackAccountSpellingNotNFCEscapesLockout(t *testing.T) {
	t.Parallel()
	tg := start(t, withPolicy(t, func(p string) string {
		return strings.Replace(p, "threshold: 10, window: 10m", "threshold: 5, window: 10m", 1)
	}))
	const guessed = "J\u030cane" // what the attacker types
	for i := range 5 {
		if code, body := do(t, "POST", tg.public+"/auth/login", `{"username":"`+guessed+`","password":"guess"}`,
			from(fmt.Sprintf("198.18.20.%d", i+1))); code != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d %.120s; want the upstream's 401", i+1, code, body)
		}
	}
	tg.syncRisk(t)
	code1, body := do(t, "POST", tg.public+"/auth/login", `{"username":"`+guessed+`","password":"guess"}`, from("198.18.20.99"))
	if code1 != http.StatusTooManyRequests || code(body) != "ACCOUNT_LOCKED" {
		t.Errorf("a 6th guess as %q after 5 failures (threshold 5): %d %.160s; want 429 ACCOUNT_LOCKED", guessed, code1, body)
	}
	for _, spelling := range []string{guessed, "\u01f0ane", "j\u030cane", "\u01f0ANE"} {
		_, body := do(t, "POST", tg.api+"/v1/check", `{"endpoint":"POST /auth/login","ip":"192.0.2.77","account":"`+spelling+`"}`, bearer(apiToken))
		if code(body) != "ACCOUNT_LOCKED" {
			t.Errorf("check of %q: %.160s; want ACCOUNT_LOCKED (one account, however spelled)", spelling, body)
		}
	}
	if n := tg.up.attemptsOn(guessed); n != 5 {
		t.Errorf("the upstream saw %d guesses; want 5", n)
	}
}
