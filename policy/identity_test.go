package policy

import "testing"

func TestNormalizeAccount(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"alice@example.com", "alice@example.com"},
		{"Alice@Example.COM", "alice@example.com"},
		{"  alice\t\n", "alice"},
		{"Jose\u0301", "jos\u00e9"}, // NFD e + combining acute -> NFC é
		{"JOS\u00c9", "jos\u00e9"},
		// no precomposed capital: lower-casing makes the pair composable
		{"J\u030cane", "\u01f0ane"},
		{"j\u030cane", "\u01f0ane"},
		{"H\u0331", "\u1e96"},
		{"\u0130\u0301", "\u00ed"}, // İ lower-cases to i, which takes the acute
		// NFKC, as Django's login form: fullwidth letters, a ligature,
		// a compatibility space are the plain ones
		{"\uff26\uff52\uff41\uff4e\uff4b", "frank"},
		{"\ufb01sh@example.com", "fish@example.com"},
		{"\u00a8x", "\u0308x"}, // a spacing diaeresis: a space (trimmed) and the mark
		{"", ""},
		{"   ", ""},
	} {
		if got := NormalizeAccount(c.in); got != c.want {
			t.Errorf("NormalizeAccount(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzNormalizeAccount: normalising an account is idempotent, so a path
// that normalises an account normalised already (riskd) keys it alike.
func FuzzNormalizeAccount(f *testing.F) {
	for _, s := range []string{"Alice@Example.COM", "J\u030cane", "H\u0331", "\u0130\u0301", "Jose\u0301", " \u212a "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := NormalizeAccount(s)
		if again := NormalizeAccount(n); again != n {
			t.Fatalf("NormalizeAccount not idempotent: %q -> %q -> %q", s, n, again)
		}
	})
}

func TestNormalizePath(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want, route string }{
		{"/auth/login", "/auth/login", "/auth/login"},
		{"/auth/login/", "/auth/login", "/auth/login"},
		{"//auth/./login", "/auth/login", "/auth/login"},
		{"/auth/%6cogin", "/auth/login", "/auth/login"},
		{"/auth/%6Cogin", "/auth/login", "/auth/login"},
		{"/auth/x/../login", "/auth/login", "/auth/login"},
		{"/auth/%2e%2e/auth/login", "/auth/login", "/auth/login"},
		{"/../../etc", "/etc", "/etc"},
		{"/a%2fb", "/a%2Fb", "/a/b"},
		{"/a%2F..%2Fb", "/a%2F..%2Fb", "/b"},
		{"/caf%C3%A9", "/caf%C3%A9", "/café"},
		{"/", "/", "/"},
		{"", "/", "/"},
		{"/a//", "/a", "/a"},
		{"/%7Euser", "/~user", "/~user"},
		{"/100%", "/100%25", "/100%"},
		{"%7%30", "/%2570", "/%70"},
	} {
		if got := NormalizePath(c.in); got != c.want {
			t.Errorf("NormalizePath(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := RoutePath(c.in); got != c.route {
			t.Errorf("RoutePath(%q) = %q, want %q", c.in, got, c.route)
		}
	}
}

// FuzzNormalizePath: normalising is idempotent and always rooted.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/auth/login/", "//a/./b/../c", "/%6c%2F%2e", "", "%", "/a%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := NormalizePath(s)
		if n == "" || n[0] != '/' {
			t.Fatalf("NormalizePath(%q) = %q: not rooted", s, n)
		}
		if again := NormalizePath(n); again != n {
			t.Fatalf("NormalizePath not idempotent: %q -> %q -> %q", s, n, again)
		}
		_ = RoutePath(s)
	})
}
