package api

import (
	"crypto/sha256"
	"net/http/httptest"
	"testing"
)

// TestClientIPPorts: X-Forwarded-For entries with a port, brackets or a
// zone are read as their address (7.1), as middleware.RemoteIP reads them.
func TestClientIPPorts(t *testing.T) {
	t.Parallel()
	trusted := prefixes([]string{"10.0.0.0/8"})
	for _, tt := range []struct{ xff, want string }{
		{"198.51.100.7:4711", "198.51.100.7"},
		{"198.51.100.7:1, 10.2.2.2:443", "198.51.100.7"},
		{"[2001:db8::1]:443", "2001:db8::1"},
		{"[2001:DB8::1]", "2001:db8::1"},
		{"fe80::1%eth0", "fe80::1"},
		{"[fe80::1%25eth0]:80", "fe80::1"},
		{"[::ffff:198.51.100.7]:80", "198.51.100.7"},
		{"198.51.100.7:", "10.1.1.1"},
		{"198.51.100.7:99999", "10.1.1.1"},
		{"[198.51.100.7]", "198.51.100.7"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.1.1.1:1"
		r.Header.Set("X-Forwarded-For", tt.xff)
		if ip, _ := clientIP(r, trusted); ip.String() != tt.want {
			t.Errorf("xff %q: got %s, want %s", tt.xff, ip, tt.want)
		}
	}
}

// TestTokenThrottlePerClient: behind a trusted proxy, failed token
// attempts count per client (the right-most untrusted X-Forwarded-For
// address), not per proxy (7.1); IPv6 clients count by their /64.
func TestTokenThrottlePerClient(t *testing.T) {
	t.Parallel()
	f := newForwardAuthFixture(t, nil) // 192.0.2.1, httptest's peer, is a trusted proxy
	f.srv.o.AdminToken = "tok"
	f.srv.tokenSum = sha256.Sum256([]byte("tok"))
	admin := func(xff, token string) int {
		return f.do(t, "GET", "/v1/admin/offenders", "", "X-Forwarded-For", xff, "Authorization", "Bearer "+token).Code
	}
	for range 10 {
		admin("198.51.100.7", "wrong")
	}
	if got := admin("198.51.100.7", "tok"); got != 429 {
		t.Errorf("the guessing client with the right token: %d, want 429", got)
	}
	if got := admin("203.0.113.9", "wrong"); got != 401 {
		t.Errorf("another client behind the same proxy, wrong token: %d, want 401 (not throttled)", got)
	}
	for range 10 {
		admin("2001:db8:1:2::1", "wrong")
	}
	if got := admin("2001:db8:1:2:ffff::9", "wrong"); got != 429 {
		t.Errorf("another address of the guessing client's /64: %d, want 429", got)
	}
	if got := admin("2001:db8:1:3::1", "wrong"); got != 401 {
		t.Errorf("a client of another /64: %d, want 401", got)
	}
}
