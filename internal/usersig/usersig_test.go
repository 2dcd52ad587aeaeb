package usersig

import (
	"strings"
	"testing"
	"time"
)

var (
	key    = []byte("k-2026-01")
	newKey = []byte("k-2026-02")
	now    = time.Unix(1_800_000_000, 0)
)

func TestVerify(t *testing.T) {
	t.Parallel()
	fresh := Sign(key, "u_42", now)
	both := fresh + strings.TrimPrefix(Sign(newKey, "u_42", now), "t=1800000000")
	for _, c := range []struct {
		name   string
		keys   [][]byte
		user   string
		header string
		o      Options
		want   bool
	}{
		{"timestamped", [][]byte{key}, "u_42", fresh, Options{}, true},
		{"spaces around elements", [][]byte{key}, "u_42", strings.Replace(fresh, ",", " , ", 1), Options{}, true},
		{"other user", [][]byte{key}, "u_43", fresh, Options{}, false},
		{"other key", [][]byte{newKey}, "u_42", fresh, Options{}, false},
		{"rotation: any key", [][]byte{newKey, key}, "u_42", fresh, Options{}, true},
		{"empty keys skipped", [][]byte{nil, key}, "u_42", fresh, Options{}, true},
		{"no key", nil, "u_42", fresh, Options{}, false},
		{"two v1, second matches", [][]byte{newKey}, "u_42", both, Options{}, true},
		{"unknown element ignored", [][]byte{key}, "u_42", fresh + ",v2=zz", Options{}, true},
		{"at max age", [][]byte{key}, "u_42", Sign(key, "u_42", now.Add(-5*time.Minute)), Options{}, true},
		{"past max age", [][]byte{key}, "u_42", Sign(key, "u_42", now.Add(-5*time.Minute-time.Second)), Options{}, false},
		{"ahead within max age", [][]byte{key}, "u_42", Sign(key, "u_42", now.Add(5*time.Minute)), Options{}, true},
		{"ahead past max age", [][]byte{key}, "u_42", Sign(key, "u_42", now.Add(5*time.Minute+time.Second)), Options{}, false},
		{"own max age", [][]byte{key}, "u_42", Sign(key, "u_42", now.Add(-time.Hour)), Options{MaxAge: 2 * time.Hour}, true},
		{"t changed", [][]byte{key}, "u_42", strings.Replace(fresh, "t=1800000000", "t=1800000001", 1), Options{}, false},
		{"bare", [][]byte{key}, "u_42", SignBare(key, "u_42"), Options{}, true},
		{"bare upper case", [][]byte{key}, "u_42", strings.ToUpper(SignBare(key, "u_42")), Options{}, true},
		{"bare refused", [][]byte{key}, "u_42", SignBare(key, "u_42"), Options{RequireTimestamp: true}, false},
		{"timestamped with bare refused", [][]byte{key}, "u_42", fresh, Options{RequireTimestamp: true}, true},
		{"empty", [][]byte{key}, "u_42", "", Options{}, false},
		{"timestamped v1 as bare of <t>.<user>", [][]byte{key}, "1800000000.u_42", strings.TrimPrefix(fresh, "t=1800000000,v1="), Options{MaxAge: time.Nanosecond}, false},
		{"bare of digits-dot id refused", [][]byte{key}, "12.u_42", SignBare(key, "12.u_42"), Options{}, false},
		{"timestamped of digits-dot id", [][]byte{key}, "12.u_42", Sign(key, "12.u_42", now), Options{}, true},
		{"bare of digits id", [][]byte{key}, "1234", SignBare(key, "1234"), Options{}, true},
		{"bare of id with dot after letters", [][]byte{key}, "a1.b", SignBare(key, "a1.b"), Options{}, true},
		{"bare of dot-first id", [][]byte{key}, ".42", SignBare(key, ".42"), Options{}, true},
	} {
		if got := Verify(c.keys, c.user, c.header, now, c.o); got != c.want {
			t.Errorf("%s: Verify(%q) = %v, want %v", c.name, c.header, got, c.want)
		}
	}
}

func TestParseMalformed(t *testing.T) {
	t.Parallel()
	mac := strings.Repeat("ab", 32)
	for _, s := range []string{
		"", "zz", mac[:62], mac + "00",
		"t=1", "v1=" + mac, "t=1,v1=" + mac[:62], "t=1,v1=xyz", "t=,v1=" + mac, "t=-1,v1=" + mac,
		"t=+1,v1=" + mac, "t=1,t=2,v1=" + mac, "t=99999999999999999999,v1=" + mac, "t=1,,v1=" + mac,
		"t=1,V1=" + mac, "t=1,v1=" + mac + ",=x", "t 1,v1=" + mac,
		"t=1" + strings.Repeat(",v1="+mac, maxSigs+1),
	} {
		if h, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) = %+v, want ErrMalformed", s, h)
		}
	}
	h, err := Parse("t=17,v1=" + mac + ",v1=" + mac)
	if err != nil || !h.Timestamped || h.T != 17 || len(h.V1) != 2 {
		t.Errorf("two v1: %+v %v", h, err)
	}
}

func TestSignFormat(t *testing.T) {
	t.Parallel()
	// printf 't=1800000000,v1=%s' "$(printf '1800000000.u_42' | openssl dgst -sha256 -hmac k-2026-01 -hex | sed 's/^.* //')"
	want := "t=1800000000,v1=" + hexHMAC(key, "1800000000.u_42")
	if got := Sign(key, "u_42", now.Add(999*time.Millisecond)); got != want {
		t.Errorf("Sign = %q, want %q", got, want)
	}
}

func hexHMAC(k []byte, msg string) string {
	return SignBare(k, msg) // the bare form is the HMAC of the message
}

// FuzzParse: Parse never panics, and what it accepts is one of the two
// forms with their invariants; a header Sign made verifies.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		Sign(key, "u_42", now), SignBare(key, "u_42"), "t=1,v1=" + strings.Repeat("0", 64) + ",v2=x",
		"t=1,t=2", " t=1 , v1=", "=", ",,,", "t=18446744073709551616,v1=00",
	} {
		f.Add(s, "u_42")
	}
	f.Fuzz(func(t *testing.T, s, user string) {
		h, err := Parse(s)
		if err == nil {
			if h.Timestamped && (len(h.V1) == 0 || len(h.V1) > maxSigs || h.T < 0) || !h.Timestamped && len(h.Bare) != 32 {
				t.Fatalf("Parse(%q) = %+v", s, h)
			}
		}
		Verify([][]byte{key}, user, s, now, Options{})
		if !Verify([][]byte{key}, user, Sign(key, user, now), now, Options{RequireTimestamp: true}) {
			t.Fatalf("a fresh signature of %q does not verify", user)
		}
	})
}
