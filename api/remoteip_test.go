package api

import (
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
