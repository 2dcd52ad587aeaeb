package api

import (
	"bufio"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestHeadersContractSpelling reads the raw HTTP/1.1 response off the wire:
// the rate-limit fields carry the contract's spelling (X-RateLimit-Limit,
// RateLimit, RateLimit-Policy), not net/http's canonical X-Ratelimit-Limit.
func TestHeadersContractSpelling(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "")
	hs := httptest.NewServer(f.srv)
	t.Cleanup(hs.Close)
	c, err := net.Dial("tcp", strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	body := `{"endpoint": "POST /auth/login", "ip": "198.51.100.7", "account": "alice"}`
	if _, err := c.Write([]byte("POST /v1/check HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: " +
		itoa(int64(len(body))) + "\r\n\r\n" + body)); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(c)
	for sc.Scan() && sc.Text() != "" {
		if name, _, ok := strings.Cut(sc.Text(), ":"); ok {
			names[name] = true
		}
	}
	for _, want := range LimitHeaders[:5] { // Degraded only on a degraded answer
		if !names[want] {
			t.Errorf("field %s not on the wire in that spelling; got %v", want, names)
		}
	}
	for _, canonical := range []string{"X-Ratelimit-Limit", "Ratelimit", "Ratelimit-Policy"} {
		if names[canonical] {
			t.Errorf("canonicalised field %s on the wire", canonical)
		}
	}
}
