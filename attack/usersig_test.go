package attack

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Attack: a timestamped user signature leaked once ("t=T,v1=X" for alice,
// valid for five minutes) is sent as the bare signature "X" of the user id
// "T.alice": HMAC(key, "T.alice") is what both forms sign, so without a
// separation the attacker holds an identity that never expires (the bare
// form is accepted by default), and the larger budgets it earns.
// Defence (7.1): the bare form is refused for a user id that starts with
// digits and a dot, the spelling of a timestamped form's signed message.
func TestAttackTimestampedSignatureReusedAsBare(t *testing.T) {
	t.Parallel()
	tg := start(t)
	signedAt := time.Now().Add(-time.Hour)
	leaked := signAt("alice", signedAt)
	v1 := leaked[strings.Index(leaked, "v1=")+3:]
	forged := strconv.FormatInt(signedAt.Unix(), 10) + ".alice"
	if code, body := do(t, "GET", tg.public+"/feed", "", from("198.51.100.1", "X-User-Id", forged, "X-User-Signature", v1)); code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	if got := tg.up.lastUser(); len(got) != 0 {
		t.Errorf("the upstream saw X-User-Id %q: a leaked timestamped signature authenticated %q for ever", got, forged)
	}
	// A bare signature of an ordinary id still authenticates.
	if code, body := do(t, "GET", tg.public+"/feed", "", from("198.51.100.1", "X-User-Id", "alice", "X-User-Signature", sign("alice"))); code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	if got := tg.up.lastUser(); len(got) != 1 || got[0] != "alice" {
		t.Errorf("the upstream saw X-User-Id %q for a valid bare signature of alice", got)
	}
}
