package service

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

const concurrencyPolicy = "version: 1\nlimits:\n  - {name: wide, by: [ip], rate: 100000/min}\n  - {name: exports, by: [user], concurrency: 7}\n"

// TestConcurrencyRefusedBehindEnvoy: with --grpc-listen a concurrency
// limit is refused by `limiter validate`, at start and on reload, naming
// the limit and its line.
func TestConcurrencyRefusedBehindEnvoy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte(concurrencyPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{ConfigPath: path, Listen: "127.0.0.1:0", GRPCListen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler), Getenv: testGetenv}
	want := path + `:4: limit "exports" is a concurrency limit, which the Envoy rate-limit service (--grpc-listen) cannot serve`
	if _, err := Check(cfg); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Check: %v", err)
	}
	if _, err := Start(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Start: %v", err)
	}
	// without --grpc-listen it starts; with it, a reload that brings one is refused
	if err := os.WriteFile(path, []byte("version: 1\nlimits:\n  - {name: wide, by: [ip], rate: 10/min}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, base := start(t, Config{ConfigPath: path, GRPCListen: "127.0.0.1:0", WatchInterval: 20 * time.Millisecond})
	// written whole, then renamed: the watcher never reads half a file
	if err := os.WriteFile(path+".new", []byte(concurrencyPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() string {
		if _, m := get(t, base+"/metrics"); !strings.Contains(m, `tollgate_policy_reloads_total{result="error"} 1`) {
			return "refusal not counted"
		}
		return ""
	})
	if resp, _ := post(t, base+"/v1/check", `{"endpoint":"GET /","ip":"192.0.2.1","user_id":"u"}`); resp.Header.Get("X-RateLimit-Limit") != "10" {
		t.Fatalf("the refused policy is in force: limit %s", resp.Header.Get("X-RateLimit-Limit"))
	}
}

// TestConcurrencyRefusedWithForwardAuth: forward auth (on by default)
// reaches every route and cannot release, so a concurrency limit is
// refused by `limiter validate`, at start and on reload, naming the limit
// and its line, unless forward auth is off; then /v1/forward-auth answers
// 404 and the limit is served.
func TestConcurrencyRefusedWithForwardAuth(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(concurrencyPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{ConfigPath: path, Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler), Getenv: testGetenv}
	want := path + `:4: limit "exports" is a concurrency limit, which forward auth (/v1/forward-auth) cannot serve: ` +
		`a gateway never says when the request it asked about ends, so its slot could not be released; ` +
		`run with --no-forward-auth (forward auth off: /v1/forward-auth answers 404) and serve the limit through proxy mode or the check API (POST /v1/release)`
	if _, err := Check(cfg); err == nil || err.Error() != want {
		t.Fatalf("Check: %v\nwant %s", err, want)
	}
	if _, err := Start(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Start: %v", err)
	}
	cfg.NoForwardAuth = true
	if _, err := Check(cfg); err != nil {
		t.Fatalf("Check with forward auth off: %v", err)
	}
	_, base := start(t, Config{ConfigPath: path, NoForwardAuth: true})
	if resp, body := post(t, base+"/v1/check", `{"endpoint":"GET /","ip":"192.0.2.1","user_id":"u"}`); resp.StatusCode != 200 || !strings.Contains(body, `"lease_id":"`) {
		t.Fatalf("check with forward auth off: %d %s", resp.StatusCode, body)
	}
	req, _ := http.NewRequest("GET", base+"/v1/forward-auth", nil)
	req.Header.Set("X-Forwarded-Method", "GET")
	req.Header.Set("X-Forwarded-Uri", "/")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.Contains(string(b), `"code":"NOT_FOUND","message":"forward auth is off (--no-forward-auth)"`) {
		t.Errorf("forward auth off: %d %s", resp.StatusCode, b)
	}

	// forward auth on: a reload that brings a concurrency limit is refused, the old policy stays
	if err := os.WriteFile(path, []byte("version: 1\nlimits:\n  - {name: wide, by: [ip], rate: 10/min}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, base = start(t, Config{ConfigPath: path, WatchInterval: 20 * time.Millisecond})
	if err := os.WriteFile(path+".new", []byte(concurrencyPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() string {
		if _, m := get(t, base+"/metrics"); !strings.Contains(m, `tollgate_policy_reloads_total{result="error"} 1`) {
			return "refusal not counted"
		}
		return ""
	})
	if resp, body := post(t, base+"/v1/check", `{"endpoint":"GET /","ip":"192.0.2.1","user_id":"u"}`); resp.Header.Get("X-RateLimit-Limit") != "10" || strings.Contains(body, "lease_id") {
		t.Fatalf("the refused policy is in force: limit %s, %s", resp.Header.Get("X-RateLimit-Limit"), body)
	}
}

// TestConcurrencyAcrossLimiters: two limiters on one Redis share a
// concurrency limit's slots: 60 concurrent checks on capacity 7 admit
// exactly 7 whichever limiter they reach, and a lease one limiter
// answered is released through the other (then 404).
func TestConcurrencyAcrossLimiters(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(concurrencyPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	url := "redis://" + srv.Addr + "/0"
	// a slow machine (-race) must not turn checks into degraded answers
	_, a := start(t, Config{RedisURL: url, ConfigPath: path, StoreTimeout: 5 * time.Second, NoForwardAuth: true})
	_, b := start(t, Config{RedisURL: url, ConfigPath: path, StoreTimeout: 5 * time.Second, NoForwardAuth: true})
	bases := []string{a, b}
	var admitted atomic.Int64
	var mu sync.Mutex
	var leases []string
	var wg sync.WaitGroup
	for i := 0; i < 60; i++ {
		wg.Add(1)
		go func(base string) {
			defer wg.Done()
			resp, body := postNoFatal(base+"/v1/check", `{"endpoint":"GET /export","ip":"192.0.2.1","user_id":"u1"}`)
			if resp == nil {
				t.Error("check failed")
				return
			}
			if resp.StatusCode == 200 && resp.Header.Get("X-RateLimit-Degraded") != "" {
				t.Errorf("degraded: %s", body)
				return
			}
			if resp.StatusCode == 200 {
				var ans struct {
					LeaseID string `json:"lease_id"`
				}
				_ = json.Unmarshal([]byte(body), &ans)
				admitted.Add(1)
				mu.Lock()
				leases = append(leases, ans.LeaseID)
				mu.Unlock()
			} else if resp.StatusCode != 429 || !strings.Contains(body, `"kind":"concurrency"`) {
				t.Errorf("check: %d %s", resp.StatusCode, body)
			}
		}(bases[i%2])
	}
	wg.Wait()
	if got := admitted.Load(); got != 7 {
		t.Fatalf("admitted %d, want exactly 7", got)
	}
	for i, id := range leases {
		if id == "" {
			t.Fatalf("an admitted check without lease_id")
		}
		release := `{"lease_id":"` + id + `"}`
		if resp, body := post(t, bases[(i+1)%2]+"/v1/release", release); resp.StatusCode != 200 {
			t.Fatalf("release through the other limiter: %d %s", resp.StatusCode, body)
		}
		if resp, _ := post(t, bases[i%2]+"/v1/release", release); resp.StatusCode != 404 {
			t.Fatalf("second release: %d, want 404", resp.StatusCode)
		}
	}
	if resp, body := post(t, a+"/v1/check", `{"endpoint":"GET /export","ip":"192.0.2.1","user_id":"u1"}`); resp.StatusCode != 200 {
		t.Fatalf("after the releases: %d %s", resp.StatusCode, body)
	}
}

// TestProxyReleasesOnRedis: in proxy mode on a real Redis a request holds
// its concurrency slot while the upstream answers (a second one meanwhile
// is 429 kind concurrency); the slot is free once the response has been
// sent, and once a client that went away has been given up.
func TestProxyReleasesOnRedis(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 4)
	var mu sync.Mutex
	finish := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		f := finish
		mu.Unlock()
		entered <- struct{}{}
		select {
		case <-f:
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, "done")
	})
	let := func() { // lets the request in the upstream finish, arms the next
		mu.Lock()
		close(finish)
		finish = make(chan struct{})
		mu.Unlock()
	}
	_, keyPrefix := testenv.Redis(t)
	policy := "version: 1\nidentity: {user_header: X-User-Id}\nlimits:\n  - {name: exports, by: [user], concurrency: 1}\n"
	_, base := start(t, Config{ConfigPath: writePolicy(t, policy), RedisURL: "redis://" + testenv.RedisAddr() + "/0", KeyPrefix: keyPrefix,
		Upstream: up, NoForwardAuth: true, StoreTimeout: 5 * time.Second})
	get := func(ctx context.Context) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/export", nil)
		req.Header.Set("X-User-Id", "u1")
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	first := make(chan int, 1)
	go func() { code, _ := get(context.Background()); first <- code }()
	<-entered
	if code, body := get(context.Background()); code != 429 || !strings.Contains(body, `"kind":"concurrency"`) {
		t.Fatalf("second in flight: %d %s", code, body)
	}
	let()
	if code := <-first; code != 200 {
		t.Fatalf("first: %d", code)
	}
	// the release follows the response: the next request is admitted once it landed
	admitted := func(what string) {
		t.Helper()
		eventually(t, 5*time.Second, func() string {
			done := make(chan int, 1)
			go func() { code, _ := get(context.Background()); done <- code }()
			select {
			case <-entered:
				let()
				if code := <-done; code != 200 {
					return what + ": " + strconv.Itoa(code)
				}
				return ""
			case code := <-done:
				return what + ": " + strconv.Itoa(code) + ", want the slot back"
			}
		})
	}
	admitted("after the response")
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan struct{})
	go func() { get(ctx); close(gone) }()
	<-entered
	cancel()
	<-gone
	admitted("after a disconnect")
}
