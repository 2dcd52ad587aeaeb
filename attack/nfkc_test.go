package attack

import (
	"fmt"
	"testing"
)

// TestAttackFullwidthAccountEscapesAccountLimit: Django's login form
// (UsernameField) normalises the username with NFKC, so "ｆｒａｎｋ"
// (fullwidth letters) logs in as frank, as do mixes of the two. Tollgate
// normalised accounts with NFC only, which keeps fullwidth letters apart:
// each spelling had a login-account budget (5 a minute) and a lockout of
// its own, and an attacker guessing frank's password from rotating
// addresses had 20 of 20 guesses taken in four spellings. Accounts are
// normalised with NFKC now, whose result is NFC too: 5 of 20.
func TestAttackFullwidthAccountEscapesAccountLimit(t *testing.T) {
	t.Parallel()
	tg := start(t)
	spellings := []string{"frank", "\uff46\uff52\uff41\uff4e\uff4b", "\uff46rank", "fr\uff41nk"}
	taken := 0
	for i := range 20 {
		ip := fmt.Sprintf("198.51.100.%d", 100+i) // a fresh address per guess: no ip limit binds
		body := fmt.Sprintf(`{"username":%q,"password":"guess-%d"}`, spellings[i%len(spellings)], i)
		switch c, b := do(t, "POST", tg.public+"/auth/login", body, from(ip)); c {
		case 401:
			taken++
		case 429:
		default:
			t.Fatalf("guess %d: %d %s", i, c, b)
		}
	}
	if taken != 5 {
		t.Fatalf("%d of 20 guesses at frank's password reached the upstream in 4 spellings NFKC makes one, want 5", taken)
	}
}
