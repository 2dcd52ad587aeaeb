package middleware_test

import (
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/tollgate-dev/tollgate/middleware"
)

func TestRemoteIP(t *testing.T) {
	t.Parallel()
	trusted := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("2001:db8::/32"),
		netip.MustParsePrefix("192.0.2.1/32"),
		netip.MustParsePrefix("172.16.5.9/12"), // masked to 172.16.0.0/12
	}
	cases := []struct {
		name    string
		trusted []netip.Prefix
		peer    string
		xff     []string
		want    string
	}{
		{name: "untrusted peer", peer: "198.51.100.7:4000", want: "198.51.100.7"},
		{name: "spoofed XFF from an untrusted peer is ignored", peer: "198.51.100.7:4000", xff: []string{"1.2.3.4"}, want: "198.51.100.7"},
		{name: "spoofed XFF chain from an untrusted peer", peer: "198.51.100.7:4000", xff: []string{"1.2.3.4, 10.0.0.1"}, want: "198.51.100.7"},
		{name: "trusted peer without XFF", peer: "10.0.0.1:4000", want: "10.0.0.1"},
		{name: "trusted peer, one hop", peer: "10.0.0.1:4000", xff: []string{"198.51.100.7"}, want: "198.51.100.7"},
		{name: "client spoof left of the real hop", peer: "10.0.0.1:4000", xff: []string{"1.2.3.4, 198.51.100.7"}, want: "198.51.100.7"},
		{name: "chain walked right to left over trusted proxies", peer: "10.0.0.1:4000", xff: []string{"203.0.113.9, 198.51.100.7, 10.0.0.2, 172.20.0.1"}, want: "198.51.100.7"},
		{name: "several header lines form one list", peer: "10.0.0.1:4000", xff: []string{"203.0.113.9", "198.51.100.7, 10.0.0.3"}, want: "198.51.100.7"},
		{name: "every hop trusted: the left-most", peer: "10.0.0.1:4000", xff: []string{"10.1.1.1, 10.2.2.2"}, want: "10.1.1.1"},
		{name: "garbage stops at the last trusted hop", peer: "10.0.0.1:4000", xff: []string{"198.51.100.7, garbage, 10.0.0.3"}, want: "10.0.0.3"},
		{name: "garbage right-most: the peer", peer: "10.0.0.1:4000", xff: []string{"198.51.100.7, garbage"}, want: "10.0.0.1"},
		{name: "empty entries skipped", peer: "10.0.0.1:4000", xff: []string{"198.51.100.7,, 10.0.0.3, "}, want: "198.51.100.7"},
		{name: "empty header value", peer: "10.0.0.1:4000", xff: []string{""}, want: "10.0.0.1"},
		{name: "entry with port", peer: "10.0.0.1:4000", xff: []string{"198.51.100.7:5555"}, want: "198.51.100.7"},
		{name: "bracketed IPv6 with port", peer: "10.0.0.1:4000", xff: []string{"[2606:4700::1]:443"}, want: "2606:4700::1"},
		{name: "bracketed IPv6", peer: "10.0.0.1:4000", xff: []string{" [2606:4700::1] "}, want: "2606:4700::1"},
		{name: "IPv4-mapped entry", peer: "10.0.0.1:4000", xff: []string{"::ffff:198.51.100.7"}, want: "198.51.100.7"},
		{name: "IPv4-mapped trusted peer", peer: "[::ffff:10.0.0.1]:4000", xff: []string{"198.51.100.7"}, want: "198.51.100.7"},
		{name: "IPv6 trusted peer", peer: "[2001:db8::5]:4000", xff: []string{"2606:4700::7"}, want: "2606:4700::7"},
		{name: "IPv6 untrusted peer", peer: "[2606:4700::2]:4000", xff: []string{"1.2.3.4"}, want: "2606:4700::2"},
		{name: "zone dropped", peer: "[fe80::1%eth0]:4000", want: "fe80::1"},
		{name: "bare address prefix", peer: "192.0.2.1:4000", xff: []string{"198.51.100.7"}, want: "198.51.100.7"},
		{name: "next to a bare address is untrusted", peer: "192.0.2.2:4000", xff: []string{"198.51.100.7"}, want: "192.0.2.2"},
		{name: "masked prefix", peer: "172.31.0.1:4000", xff: []string{"198.51.100.7"}, want: "198.51.100.7"},
		{name: "no trusted proxies", trusted: []netip.Prefix{}, peer: "10.0.0.1:4000", xff: []string{"198.51.100.7"}, want: "10.0.0.1"},
		{name: "peer without port", peer: "198.51.100.7", want: "198.51.100.7"},
		{name: "unix socket peer", peer: "@", xff: []string{"198.51.100.7"}, want: ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tp := trusted
			if c.trusted != nil {
				tp = c.trusted
			}
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = c.peer
			for _, v := range c.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if got := middleware.RemoteIP(tp)(r); got != c.want {
				t.Errorf("RemoteIP = %q, want %q", got, c.want)
			}
		})
	}
}
