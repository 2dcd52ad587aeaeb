package attestation

import (
	"testing"
	"time"
)

// FuzzCheckSigned: no string verifies as a signed challenge but one
// signed for that device and not expired, and none panics.
func FuzzCheckSigned(f *testing.F) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	fixed := func(b []byte) (int, error) { return copy(b, "a fixed nonce!!!"), nil } // the same in every fuzzing process
	good, err := signChallenge(secret, "d", now.Add(ChallengeTTL), fixed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, "d")
	f.Add(good, "e")
	f.Add(good[:53]+"A", "d")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, challenge, device string) {
		_, ok, expired := checkSigned(secret, device, challenge, now)
		if (ok || expired) && (challenge != good || device != "d") {
			t.Fatalf("%q for %q verified (ok %v, expired %v)", challenge, device, ok, expired)
		}
		if challenge == good && device == "d" && !ok {
			t.Fatal("the signed challenge does not verify")
		}
	})
}
