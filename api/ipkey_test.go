package api

import (
	"net/url"
	"strings"
	"testing"
)

// TestAdminIPv6PrefixIDs: an admin ip id of an IPv6 address addresses its
// /64 (7.1); the prefix is accepted as an id when it has that length.
func TestAdminIPv6PrefixIDs(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "tok")
	auth := []string{"Authorization", "Bearer tok"}
	w := f.do(t, "PUT", "/v1/admin/multipliers/ip/2001:db8:1:2::1", `{"multiplier":0.5,"ttl":"10m"}`, auth...)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"id":"2001:db8:1:2::/64"`) {
		t.Fatalf("PUT ip/2001:db8:1:2::1: %d %s; want the /64 addressed", w.Code, w.Body)
	}
	for _, id := range []string{"2001:db8:1:2:ffff::9", "2001:db8:1:2::/64"} {
		w := f.do(t, "GET", "/v1/admin/subjects/ip/"+url.PathEscape(id), "", auth...)
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"id":"2001:db8:1:2::/64"`) || !strings.Contains(w.Body.String(), `"value":0.5`) {
			t.Errorf("GET ip/%s: %d %s; want the /64's multiplier", id, w.Code, w.Body)
		}
	}
	w = f.do(t, "GET", "/v1/admin/subjects/ip/198.51.100.7", "", auth...)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"id":"198.51.100.7"`) {
		t.Errorf("IPv4: %d %s", w.Code, w.Body)
	}
	for _, id := range []string{"2001:db8:1:2::/48", "198.51.100.0/24", "2001:db8::/zz"} {
		if w := f.do(t, "GET", "/v1/admin/subjects/ip/"+url.PathEscape(id), "", auth...); w.Code != 400 || !strings.Contains(w.Body.String(), "/64") {
			t.Errorf("GET ip/%s: %d %s; want 400 naming /64", id, w.Code, w.Body)
		}
	}
}
