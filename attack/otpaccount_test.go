package attack

import (
	"fmt"
	"strings"
	"testing"
)

// withOTPAccountLimit adds an OTP route and a per-account limit on it to
// the attack policy: 3 code guesses per account a minute.
var withOTPAccountLimit = func(p string) string {
	p = insertAfter(`{match: "POST /token",`, `  - {match: "POST /otp/verify", class: otp}`+"\n")(p)
	return insertAfter("name: login-account,", "  - {name: otp-account,   by: [account],         rate: 3/min,   if: {class: otp}}\n")(p)
}

// TestAttackOTPGuessesUnlimitedPerAccount: the limit on OTP guesses per
// account (3 a minute) never applied in proxy mode, because the proxy
// read the account from the body on class auth routes only: a request on
// the otp route carried no account, so the limit keyed by it was not
// decided and an attacker guessing a victim's 6-digit code from rotating
// addresses had 40 of 40 guesses reach the upstream. The proxy reads the
// account on every class that a limit or a lock keyed by account applies
// to now: 3 of 40.
func TestAttackOTPGuessesUnlimitedPerAccount(t *testing.T) {
	t.Parallel()
	tg := start(t, withPolicy(t, withOTPAccountLimit))
	for i := range 40 {
		ip := fmt.Sprintf("203.0.113.%d", i+1) // a fresh address per guess: no ip limit binds
		h := from(ip)
		body := fmt.Sprintf(`{"username":"alice","code":"%06d"}`, i)
		if c, b := do(t, "POST", tg.public+"/otp/verify", body, h); c != 200 && c != 429 {
			t.Fatalf("guess %d: %d %s", i, c, b)
		} else if c == 429 && !strings.Contains(b, `"limit":"otp-account"`) {
			t.Fatalf("guess %d denied by another limit: %s", i, b)
		}
	}
	if got := tg.up.reached("POST /otp/verify"); got != 3 {
		t.Fatalf("%d of 40 guesses at alice's code reached the upstream, want 3", got)
	}
}
