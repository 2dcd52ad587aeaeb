package service

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// streamCfg is proxy mode in front of up with deadlines short enough to
// be passed many times within a test.
func streamCfg(up string) Config {
	return Config{Upstream: up, UpstreamTimeout: 300 * time.Millisecond, ProxyIdleTimeout: 300 * time.Millisecond}
}

// TestProxyStreamsPastEveryDeadline (7.5): a response that keeps moving
// streams for as long as the upstream sends, well past the upstream
// timeout, the idle timeout and their sum, and arrives whole; and the
// public listener's server has no total read or write deadline of its own
// (httpWriteTimeout, 30 s, would cut a stream the test is too short for).
func TestProxyStreamsPastEveryDeadline(t *testing.T) {
	t.Parallel()
	if hs := apiServer(http.NotFoundHandler(), true, slog.New(slog.DiscardHandler)); hs.WriteTimeout != 0 || hs.ReadTimeout != 0 {
		t.Fatalf("public listener: write timeout %v, read timeout %v; want none (the proxy sets per-response deadlines)", hs.WriteTimeout, hs.ReadTimeout)
	}
	const chunks = 15 // 100 ms apart: 1.5 s, more than 300 + 300 ms
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range chunks {
			_, _ = io.WriteString(w, "data: "+strings.Repeat("x", i)+"\n\n")
			http.NewResponseController(w).Flush()
			time.Sleep(100 * time.Millisecond)
		}
	})
	_, base := start(t, streamCfg(up))
	resp, err := http.Get(base + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %d after %d bytes: %v", resp.StatusCode, len(body), err)
	}
	var want strings.Builder
	for i := range chunks {
		want.WriteString("data: " + strings.Repeat("x", i) + "\n\n")
	}
	if string(body) != want.String() {
		t.Fatalf("stream arrived as %q, want %q", body, want.String())
	}
}

// TestProxyIdleStreamIsCut: a response that stops moving is cut after the
// idle timeout: the client gets the bytes sent and then a broken body,
// never a clean end that would pass for the whole answer.
func TestProxyIdleStreamIsCut(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first")
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	// the upstream timeout far off: the cut is the idle timeout's (300 ms)
	cfg := streamCfg(up)
	cfg.UpstreamTimeout = time.Minute
	_, base := start(t, cfg)
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Get(base + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "first" || err == nil || strings.Contains(err.Error(), "Client.Timeout") {
		t.Fatalf("silent stream: %d %q %v; want 200, \"first\", then a broken body", resp.StatusCode, body, err)
	}
}

// TestProxyUpstreamTimeoutAndUnreachable (7.5): an upstream that has not
// answered within --upstream-timeout gets the client a 504
// UPSTREAM_TIMEOUT envelope; one that cannot be reached, 502.
func TestProxyUpstreamTimeoutAndUnreachable(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	slow := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	gone := "http://" + testenv.RefusedAddr(t) // connection refused
	for _, c := range []struct {
		up   string
		code int
		env  string
	}{{slow, 504, "UPSTREAM_TIMEOUT"}, {gone, 502, "UPSTREAM_UNAVAILABLE"}} {
		// the idle timeout far off: the 504 within the client's 10 s is
		// the upstream timeout's (300 ms)
		cfg := streamCfg(c.up)
		cfg.ProxyIdleTimeout = time.Minute
		_, base := start(t, cfg)
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(base + "/feed")
		if err != nil {
			t.Fatal(err)
		}
		var env struct {
			Error struct{ Code string } `json:"error"`
		}
		err = json.NewDecoder(resp.Body).Decode(&env)
		resp.Body.Close()
		if resp.StatusCode != c.code || err != nil || env.Error.Code != c.env || resp.Header.Get("X-Request-Id") == "" {
			t.Fatalf("%s: %d %q %v; want %d %s", c.up, resp.StatusCode, env.Error.Code, err, c.code, c.env)
		}
	}
}
