package attestation_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/attestation"
)

var tokenKey = []byte("0123456789abcdef0123456789abcdef")

// TestDeviceTokens (6.3): a token verifies for its device until its expiry,
// on any Tokens with the same key, and for nothing else.
func TestDeviceTokens(t *testing.T) {
	t.Parallel()
	a, err := attestation.NewTokens(tokenKey)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := attestation.NewTokens(tokenKey)                            // another limiter host, same key
	other, _ := attestation.NewTokens([]byte(strings.Repeat("z", 32))) // another key
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tok := a.Issue("d1", now.Add(24*time.Hour))
	for _, c := range []struct {
		name  string
		tk    *attestation.Tokens
		token string
		dev   string
		at    time.Time
		want  bool
	}{
		{"issuer", a, tok, "d1", now, true},
		{"another host", b, tok, "d1", now.Add(24*time.Hour - time.Second), true},
		{"expired", a, tok, "d1", now.Add(24 * time.Hour), false},
		{"another device", a, tok, "d2", now, false},
		{"another key", other, tok, "d1", now, false},
		{"nil tokens", nil, tok, "d1", now, false},
		{"empty", a, "", "d1", now, false},
		{"no device", a, tok, "", now, false},
		{"forged expiry", a, strings.Replace(tok, ".17", ".27", 1), "d1", now, false},
		{"truncated", a, tok[:len(tok)-1], "d1", now, false},
		{"garbage", a, "dt1.x.y", "d1", now, false},
		{"leading zero", a, strings.Replace(tok, "dt1.", "dt1.0", 1), "d1", now, false},
		// base64's decoder skips CR and LF: one token, one spelling
		{"CR in the MAC", a, tok[:len(tok)-10] + "\r" + tok[len(tok)-10:], "d1", now, false},
		{"LF at the end", a, tok + "\n", "d1", now, false},
	} {
		if got := c.tk.Verify(c.token, c.dev, c.at); got != c.want {
			t.Errorf("%s: Verify = %v, want %v (token %q)", c.name, got, c.want, c.token)
		}
		// Expiry checks all but the time: expired tokens are the issuer's too
		exp, ok := c.tk.Expiry(c.token, c.dev)
		if want := c.want || c.name == "expired"; ok != want || ok && !exp.Equal(now.Add(24*time.Hour)) {
			t.Errorf("%s: Expiry = %v %v, want %v", c.name, exp, ok, want)
		}
	}
	if _, err := attestation.NewTokens([]byte("short")); err == nil {
		t.Error("a 5-byte key was accepted")
	}
	r1, r2 := attestation.RandomTokens(), attestation.RandomTokens()
	if !r1.Verify(r1.Issue("d", now.Add(time.Hour)), "d", now) || r2.Verify(r1.Issue("d", now.Add(time.Hour)), "d", now) {
		t.Error("random keys: a token must verify only where it was issued")
	}
}

func TestTokensFromPolicy(t *testing.T) {
	t.Parallel()
	env := map[string]string{"GOOD": string(tokenKey), "SHORT": "abc"}
	get := func(k string) string { return env[k] }
	if tk, err := attestation.TokensFromPolicy("", get); tk != nil || err != nil {
		t.Errorf("no env: %v %v", tk, err)
	}
	if tk, err := attestation.TokensFromPolicy("GOOD", get); tk == nil || err != nil {
		t.Errorf("good: %v %v", tk, err)
	}
	for _, name := range []string{"SHORT", "UNSET"} {
		if _, err := attestation.TokensFromPolicy(name, get); err == nil || !strings.Contains(err.Error(), name) || strings.Contains(err.Error(), "abc") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzDeviceToken checks that Verify never panics and accepts only the
// token issued for the device.
func FuzzDeviceToken(f *testing.F) {
	tk, _ := attestation.NewTokens(tokenKey)
	now := time.Unix(1_700_000_000, 0)
	good := tk.Issue("d1", now.Add(time.Hour))
	for _, s := range []string{good, "", "dt1.", "dt1..", "dt1.1.", "dt1.99999999999.AAAA", good + "=", "dt2" + good[3:]} {
		f.Add(s, "d1")
	}
	f.Fuzz(func(t *testing.T, token, device string) {
		if tk.Verify(token, device, now) && (token != good || device != "d1") {
			t.Fatalf("accepted %q for %q", token, device)
		}
	})
}
