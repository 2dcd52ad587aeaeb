package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
)

const kindsPolicy = `version: 1
identity: {user_header: X-User-Id}
routes:
  - {match: "POST /sms", class: sms}
  - {match: "* *", class: read}
limits:
  - {name: sms-month, by: [ip], quota: 2/month, if: {class: sms}}
  - {name: exports, by: [user], concurrency: 2, lease_ttl: 30s, if: {class: read}}
`

// kindsServer is a Server over kindsPolicy and a memory store at *now.
func kindsServer(t *testing.T, now *time.Time) *Server {
	t.Helper()
	return policyServer(t, now, kindsPolicy)
}

// policyServer is a Server over the policy text and a memory store at *now.
func policyServer(t *testing.T, now *time.Time, text string) *Server {
	t.Helper()
	p, err := policy.Parse("kinds.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	clock := func() time.Time { return *now }
	store := bucket.NewMemoryStore(bucket.MemoryOptions{Now: clock})
	eng, err := engine.New(engine.Options{Store: store, Policy: func() *policy.Policy { return p }, Clock: clock,
		Metrics: engine.NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{Engine: eng, Store: store, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	srv.SetState("ready")
	return srv
}

func serve(srv http.Handler, method, path, body string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("X-Request-Id", "req-1")
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, r)
	return w
}

// TestCheckQuota: a calendar quota answers the next month's start as its
// reset (body and X-RateLimit-Reset) and the month's length as the IETF
// w, and denies with details.kind quota once the month is spent.
func TestCheckQuota(t *testing.T) {
	t.Parallel()
	now := t0 // 2024-04-19T10:30:00Z; May starts at 1714521600
	srv := kindsServer(t, &now)
	sms := `{"endpoint": "POST /sms", "ip": "198.51.100.7"}`
	expect(t, serve(srv, "POST", "/v1/check", sms), 200,
		`{"allowed":true,"limit":2,"remaining":1,"reset":1714521600,"policy":"sms-month","request_id":"req-1"}`,
		"X-RateLimit-Reset", "1714521600", "RateLimit-Policy", `"sms-month";q=2;w=2592000`, "RateLimit", `"sms-month";r=1;t=999000`)
	serve(srv, "POST", "/v1/check", sms)
	expect(t, serve(srv, "POST", "/v1/check", sms), 429,
		`{"error":{"code":"RATE_LIMITED","message":"Too many requests","details":{"retry_after_ms":999000000,"limit":"sms-month","scope":"ip","kind":"quota"},"request_id":"req-1"}}`,
		"X-RateLimit-Reset", "1714521600", "Retry-After", "999000")
	now = time.Unix(1714521600, 0)
	expect(t, serve(srv, "POST", "/v1/check", sms), 200, "", "X-RateLimit-Remaining", "1", "RateLimit-Policy", `"sms-month";q=2;w=2678400`)
}

// TestCheckQuotaDayAndWeek: a daily quota resets at the next UTC midnight
// and a weekly one at the next Monday's, in the body's reset, in
// X-RateLimit-Reset and in the IETF t, with w the period's length; a
// spent week waits (Retry-After) until Monday and passes then.
func TestCheckQuotaDayAndWeek(t *testing.T) {
	t.Parallel()
	now := t0 // Friday 2024-04-19T10:30:00Z
	srv := policyServer(t, &now, `version: 1
routes:
  - {match: "POST /sms", class: sms}
  - {match: "POST /signup", class: signup}
limits:
  - {name: sms-day, by: [ip], quota: 2/day, if: {class: sms}}
  - {name: signup-week, by: [ip], quota: 1/week, if: {class: signup}}
`)
	const midnight, monday = "1713571200", "1713744000" // Saturday 00:00, Monday 2024-04-22 00:00 UTC
	sms := `{"endpoint": "POST /sms", "ip": "198.51.100.7"}`
	expect(t, serve(srv, "POST", "/v1/check", sms), 200,
		`{"allowed":true,"limit":2,"remaining":1,"reset":`+midnight+`,"policy":"sms-day","request_id":"req-1"}`,
		"X-RateLimit-Reset", midnight, "RateLimit-Policy", `"sms-day";q=2;w=86400`, "RateLimit", `"sms-day";r=1;t=48600`)
	signup := `{"endpoint": "POST /signup", "ip": "198.51.100.7"}`
	expect(t, serve(srv, "POST", "/v1/check", signup), 200,
		`{"allowed":true,"limit":1,"remaining":0,"reset":`+monday+`,"policy":"signup-week","request_id":"req-1"}`,
		"X-RateLimit-Reset", monday, "RateLimit-Policy", `"signup-week";q=1;w=604800`, "RateLimit", `"signup-week";r=0;t=221400`)
	expect(t, serve(srv, "POST", "/v1/check", signup), 429,
		`{"error":{"code":"RATE_LIMITED","message":"Too many requests","details":{"retry_after_ms":221400000,"limit":"signup-week","scope":"ip","kind":"quota"},"request_id":"req-1"}}`,
		"X-RateLimit-Reset", monday, "Retry-After", "221400")
	now = time.Unix(1713744000, 0).Add(-time.Second) // Sunday 23:59:59: still the week
	expect(t, serve(srv, "POST", "/v1/check", signup), 429, "", "Retry-After", "1")
	now = time.Unix(1713744000, 0)
	expect(t, serve(srv, "POST", "/v1/check", signup), 200, "", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1714348800")
	expect(t, serve(srv, "POST", "/v1/check", sms), 200, "", "X-RateLimit-Remaining", "1", "X-RateLimit-Reset", "1713830400")
}

// leaseIn returns the lease_id of a check answer.
func leaseIn(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	var a struct {
		LeaseID string `json:"lease_id"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil || a.LeaseID == "" {
		t.Fatalf("no lease_id in %d %s (%v)", w.Code, w.Body, err)
	}
	return a.LeaseID
}

// TestCheckConcurrencyAndRelease: each admitted check of a concurrency
// limit answers a lease_id; the third in flight is 429 with details.kind
// concurrency; POST /v1/release frees a slot once (then 404 NOT_FOUND),
// and refuses a malformed body or lease id with 400.
func TestCheckConcurrencyAndRelease(t *testing.T) {
	t.Parallel()
	now := t0
	srv := kindsServer(t, &now)
	exp := `{"endpoint": "GET /export", "ip": "198.51.100.7", "user_id": "u1"}`
	a := leaseIn(t, serve(srv, "POST", "/v1/check", exp))
	b := leaseIn(t, serve(srv, "POST", "/v1/check", exp))
	if a == b {
		t.Fatalf("one lease twice: %s", a)
	}
	expect(t, serve(srv, "POST", "/v1/check", exp), 429,
		`{"error":{"code":"RATE_LIMITED","message":"Too many requests","details":{"retry_after_ms":30000,"limit":"exports","scope":"user","kind":"concurrency"},"request_id":"req-1"}}`,
		"X-RateLimit-Limit", "2", "X-RateLimit-Remaining", "0")
	release := `{"lease_id": "` + a + `"}`
	expect(t, serve(srv, "POST", "/v1/release", release), 200, `{"released":true,"request_id":"req-1"}`)
	expect(t, serve(srv, "POST", "/v1/release", release), 404,
		`{"error":{"code":"NOT_FOUND","message":"no such lease (unknown, already released or expired)","details":{},"request_id":"req-1"}}`)
	leaseIn(t, serve(srv, "POST", "/v1/check", exp))
	for body, msg := range map[string]string{
		`{}`:                           "lease_id: required",
		`{"lease_id": 5}`:              `field \"lease_id\" must be a string`,
		`{"lease_id": "x", "more": 1}`: `unknown field \"more\"`,
		`{"lease_id": "` + b + `"}}`:   "body: unexpected data after the JSON object",
		`{"lease_id": "nope"}`:         "lease_id: not a lease id",
		`{"lease_id": "` + strings.ToUpper(b[:24]) + b[24:] + `"}`: "lease_id: not a lease id",
	} {
		w := serve(srv, "POST", "/v1/release", body)
		if w.Code != 400 || !strings.Contains(w.Body.String(), `"code":"BAD_REQUEST"`) || !strings.Contains(w.Body.String(), msg) {
			t.Errorf("release %s: %d %s, want 400 with %q", body, w.Code, w.Body, msg)
		}
	}
}

// TestForwardAuthRefusesConcurrency: forward auth cannot know when a
// request ends, so a request a concurrency limit applies to is refused
// with 400 naming the limit, and holds no slot.
func TestForwardAuthRefusesConcurrency(t *testing.T) {
	t.Parallel()
	now := t0
	srv := kindsServer(t, &now)
	fa := []string{"X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/export", "X-Forwarded-For", "198.51.100.7", "X-User-Id", "u1"}
	for i := 0; i < 3; i++ {
		w := serve(srv, "GET", "/v1/forward-auth", "", fa...)
		if w.Code != 400 || !strings.Contains(w.Body.String(), `"limit":"exports"`) {
			t.Fatalf("forward auth %d: %d %s", i, w.Code, w.Body)
		}
	}
	// no slot is held: two checks still get theirs
	exp := `{"endpoint": "GET /export", "ip": "198.51.100.7", "user_id": "u1"}`
	leaseIn(t, serve(srv, "POST", "/v1/check", exp))
	leaseIn(t, serve(srv, "POST", "/v1/check", exp))
}

// TestProxyReleasesSlots: in proxy mode a request holds its concurrency
// slot while the upstream answers: a second one is refused meanwhile;
// the slot is free once the response has been sent, and also once a
// client that went away has been given up.
func TestProxyReleasesSlots(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{}, 10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, "done")
	}))
	t.Cleanup(up.Close)
	p, err := policy.Parse("kinds.yaml", []byte(strings.Replace(kindsPolicy, "concurrency: 2", "concurrency: 1", 1)))
	if err != nil {
		t.Fatal(err)
	}
	eng, _ := engine.New(engine.Options{Store: bucket.NewMemoryStore(bucket.MemoryOptions{}), Policy: func() *policy.Policy { return p }})
	srv, _ := New(Options{Engine: eng})
	u, _ := url.Parse(up.URL)
	if err := srv.EnableProxy(ProxyOptions{Upstream: u}); err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(srv.Public())
	t.Cleanup(front.Close)
	get := func(ctx context.Context) (int, string, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", front.URL+"/export", nil)
		req.Header.Set("X-User-Id", "u1")
		resp, err := front.Client().Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	// poll: the slot frees just after the response has been sent
	admitted := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; {
			done := make(chan int, 1)
			go func() {
				code, _, _ := get(context.Background())
				done <- code
			}()
			select {
			case <-entered:
				close(release) // let it (and only it) finish
				if code := <-done; code != 200 {
					t.Fatalf("%s: %d", what, code)
				}
				release = make(chan struct{})
				return
			case code := <-done:
				if code != 429 || time.Now().After(deadline) {
					t.Fatalf("%s: %d, want the slot back", what, code)
				}
			}
		}
	}
	first := make(chan int, 1)
	go func() {
		code, _, _ := get(context.Background())
		first <- code
	}()
	<-entered
	code, body, err := get(context.Background())
	if err != nil || code != 429 || !strings.Contains(body, `"kind":"concurrency"`) {
		t.Fatalf("second in flight: %d %s %v", code, body, err)
	}
	close(release)
	if c := <-first; c != 200 {
		t.Fatalf("first: %d", c)
	}
	release = make(chan struct{})
	admitted("after the response")
	// a client that goes away: its slot is freed too
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan struct{})
	go func() {
		_, _, _ = get(ctx)
		close(gone)
	}()
	<-entered
	cancel()
	<-gone
	admitted("after a disconnect")
}

// TestDecisionEventsNameKindAndLease: a decision event names its binding
// limit's kind, and an admitted request of a concurrency limit carries the
// lease_id the check answered, so riskd, replay and a consumer of the
// stream can tell quotas and slots from buckets (7.4).
func TestDecisionEventsNameKindAndLease(t *testing.T) {
	t.Parallel()
	now := t0
	srv := kindsServer(t, &now)
	events := &sink{}
	srv.o.Events = events
	lease := leaseIn(t, serve(srv, "POST", "/v1/check", `{"endpoint": "GET /export", "ip": "198.51.100.7", "user_id": "u1"}`))
	if ev := events.last(t); ev.Limit != "exports" || ev.Kind != "concurrency" || ev.LeaseID != lease || !ev.Allowed {
		t.Fatalf("concurrency event %+v, want limit exports, kind concurrency, lease_id %s", ev, lease)
	}
	serve(srv, "POST", "/v1/check", `{"endpoint": "POST /sms", "ip": "198.51.100.7"}`)
	if ev := events.last(t); ev.Limit != "sms-month" || ev.Kind != "quota" || ev.LeaseID != "" {
		t.Fatalf("quota event %+v, want limit sms-month, kind quota, no lease", ev)
	}
}
