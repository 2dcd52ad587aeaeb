package api

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

const attrPolicy = `version: 1
identity:
  attributes: {plan: X-Plan, tenant: X-Tenant}
  account_header: X-Account
  device_header: X-Device-Id
lists:
  blocked:  {file: blocked.txt, kind: ip}
  staff:    {file: staff.txt, kind: account}
  internal: {file: internal.txt, kind: "attr:tenant"}
  phones:   {file: phones.txt, kind: device}
  stolen:   {file: stolen.txt, kind: device}
allow: [staff, internal, phones]
deny: [blocked, stolen]
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "* *", class: write}
limits:
  - {name: free-plan, by: [attr:plan, ip], rate: 2/min, if: {attr: {plan: [free, trial]}}}
  - {name: tenant,    by: [attr:tenant],   rate: 100/min}
  - {name: ip,        by: [ip],            rate: 5/min}
`

// sink records published decisions.
type sink struct {
	mu   sync.Mutex
	list []streams.Decision
}

func (s *sink) Decision(d *streams.Decision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list = append(s.list, *d)
}

func (s *sink) last(t *testing.T) streams.Decision {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.list) == 0 {
		t.Fatal("no decision published")
	}
	return s.list[len(s.list)-1]
}

type attrFixture struct {
	fixture
	events   *sink
	reporter *fakeReporter
	metrics  *engine.Metrics
}

// loadAttrPolicy writes attrPolicy and its list files to a directory.
func loadAttrPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	dir := t.TempDir()
	for name, text := range map[string]string{
		"blocked.txt":  "# abusers\n203.0.113.0/24\n",
		"staff.txt":    "Alice@Example.com\n",
		"internal.txt": "tollgate-dev\n",
		"phones.txt":   "vip-phone\n",
		"stolen.txt":   "stolen-phone\n",
		"p.yaml":       attrPolicy,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p, err := policy.Load(filepath.Join(dir, "p.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// attrTokens signs the device tokens of attrFixture's server.
var attrTokens = func() *attestation.Tokens {
	tk, err := attestation.NewTokens([]byte("attr-fixture-device-token-key-32-bytes"))
	if err != nil {
		panic(err)
	}
	return tk
}()

// newAttrFixture serves attrPolicy over the memory store, or over the
// shared Redis when redisStore is set.
func newAttrFixture(t *testing.T, redisStore bool) *attrFixture {
	t.Helper()
	p := loadAttrPolicy(t)
	f := &attrFixture{fixture: fixture{now: t0, reg: prometheus.NewRegistry()}, events: &sink{}, reporter: &fakeReporter{}}
	prefix := "tg:"
	f.store = bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return f.now }})
	if redisStore {
		c, pfx := testenv.Redis(t)
		rs := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: 5 * time.Second, Prefix: pfx})
		t.Cleanup(func() { rs.Close() })
		f.store, prefix = rs, pfx
	}
	f.metrics = engine.NewMetrics(f.reg)
	eng, err := engine.New(engine.Options{Store: f.store, Policy: func() *policy.Policy { return p }, Metrics: f.metrics, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	f.srv, err = New(Options{Engine: eng, Gatherer: f.reg, Now: func() time.Time { return f.now }, Events: f.events, Reporter: f.reporter,
		DeviceTokens: func() *attestation.Tokens { return attrTokens }})
	if err != nil {
		t.Fatal(err)
	}
	f.srv.SetState("ready")
	return f
}

func TestCheckAttributes(t *testing.T) {
	t.Parallel()
	for _, redisStore := range []bool{false, true} {
		t.Run(fmt.Sprintf("redis=%v", redisStore), func(t *testing.T) {
			t.Parallel()
			f := newAttrFixture(t, redisStore)
			free := `{"endpoint":"GET /feed","ip":"198.51.100.7","attributes":{"plan":"free","tenant":"acme"}}`
			w := f.do(t, "POST", "/v1/check", free)
			expect(t, w, 200, "", "X-RateLimit-Limit", "2", "X-RateLimit-Remaining", "1")
			if ev := f.events.last(t); ev.Attributes["plan"] != "free" || ev.Attributes["tenant"] != "acme" || len(ev.Attributes) != 2 || ev.Limit != "free-plan" {
				t.Fatalf("event %+v", ev)
			}
			f.do(t, "POST", "/v1/check", free)
			w = f.do(t, "POST", "/v1/check", free)
			if w.Code != 429 || !strings.Contains(w.Body.String(), `"limit":"free-plan","scope":"attr:plan"`) {
				t.Fatalf("third free request: %d %s", w.Code, w.Body)
			}
			// another plan is not limited by free-plan: ip (5/min) binds, 3 taken
			w = f.do(t, "POST", "/v1/check", `{"endpoint":"GET /feed","ip":"198.51.100.7","attributes":{"plan":"paid"}}`)
			expect(t, w, 200, "", "X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "2")
			// without attributes: no event attributes
			f.do(t, "POST", "/v1/check", `{"endpoint":"GET /feed","ip":"192.0.2.1"}`)
			if ev := f.events.last(t); ev.Attributes != nil || ev.Limit != "ip" {
				t.Fatalf("event %+v", ev)
			}
		})
	}
}

func TestCheckAttributesRejected(t *testing.T) {
	t.Parallel()
	f := newAttrFixture(t, false)
	many := make([]string, 17)
	for i := range many {
		many[i] = fmt.Sprintf(`"a%d":"x"`, i)
	}
	for _, c := range []struct{ attrs, msg string }{
		{`{` + strings.Join(many, ",") + `}`, `field \"attributes\" has 17 entries, at most 16`},
		{`{"plan":"free","Plan":"x"}`, `field \"attributes\": \"Plan\" is not a valid attribute name (want 1-32 characters of a-z 0-9 _)`},
		{`{"` + strings.Repeat("a", 33) + `":"x"}`, `is not a valid attribute name`},
		{`{"plan":"` + strings.Repeat("x", 257) + `"}`, `field \"attributes.plan\" is longer than 256 bytes`},
		{`{"plan":"a\u0001"}`, `field \"attributes.plan\" contains a control character`},
		{`{"plan":1}`, `field \"attributes\" must be an object of string values`},
		{`["plan"]`, `field \"attributes\" must be an object of string values`},
	} {
		w := f.do(t, "POST", "/v1/check", `{"endpoint":"GET /","ip":"192.0.2.1","attributes":`+c.attrs+`}`)
		if w.Code != 400 || !strings.Contains(w.Body.String(), `"code":"BAD_REQUEST"`) || !strings.Contains(w.Body.String(), c.msg) {
			t.Errorf("%s: %d %s, want %s", c.attrs, w.Code, w.Body, c.msg)
		}
	}
	// 16 attributes of 256 bytes are fine
	ok := make([]string, 16)
	for i := range ok {
		ok[i] = fmt.Sprintf(`"a%d":"%s"`, i, strings.Repeat("v", 256))
	}
	if w := f.do(t, "POST", "/v1/check", `{"endpoint":"GET /","ip":"192.0.2.1","attributes":{`+strings.Join(ok, ",")+`}}`); w.Code != 200 {
		t.Fatalf("16 attributes: %d %s", w.Code, w.Body)
	}
}

func TestCheckLists(t *testing.T) {
	t.Parallel()
	for _, redisStore := range []bool{false, true} {
		t.Run(fmt.Sprintf("redis=%v", redisStore), func(t *testing.T) {
			t.Parallel()
			f := newAttrFixture(t, redisStore)
			for i := 0; i < 3; i++ {
				expect(t, f.do(t, "POST", "/v1/check", `{"endpoint":"GET /","ip":"203.0.113.50","account":"alice@example.com"}`), 403,
					`{"error":{"code":"DENIED","message":"Request denied","details":{"list":"blocked"},"request_id":"req-1"}}`,
					"X-RateLimit-Limit", "", "Retry-After", "")
			}
			if ev := f.events.last(t); ev.Result != "denied_list" || ev.Limit != "blocked" || ev.Allowed {
				t.Fatalf("event %+v", ev)
			}
			// staff (account normalised) and the internal tenant are exempt from every limit
			for i := 0; i < 8; i++ {
				expect(t, f.do(t, "POST", "/v1/check", `{"endpoint":"GET /","ip":"198.51.100.7","account":" ALICE@example.com"}`), 200,
					`{"allowed":true,"request_id":"req-1"}`, "X-RateLimit-Limit", "", "RateLimit-Policy", "")
				expect(t, f.do(t, "POST", "/v1/check", `{"endpoint":"GET /","ip":"198.51.100.7","attributes":{"tenant":"tollgate-dev","plan":"free"}}`), 200,
					`{"allowed":true,"request_id":"req-1"}`)
			}
			if ev := f.events.last(t); ev.Result != "allowed_list" || ev.Limit != "internal" || !ev.Allowed {
				t.Fatalf("event %+v", ev)
			}
			// nothing was taken from the ip bucket
			expect(t, f.do(t, "POST", "/v1/check", `{"endpoint":"GET /","ip":"198.51.100.7"}`), 200, "", "X-RateLimit-Remaining", "4")
			// the allow-listed phone's id without its token is limited like
			// any request; with its token it is exempt (7.1)
			expect(t, f.do(t, "POST", "/v1/check", `{"endpoint":"GET /","ip":"198.51.100.9","device_id":"vip-phone"}`), 200, "", "X-RateLimit-Remaining", "4")
			tok := attrTokens.Issue("vip-phone", t0.Add(time.Hour))
			expect(t, f.do(t, "POST", "/v1/check", `{"endpoint":"GET /","ip":"198.51.100.9","device_id":"vip-phone","device_token":"`+tok+`"}`), 200,
				`{"allowed":true,"request_id":"req-1"}`, "X-RateLimit-Limit", "")
			if ev := f.events.last(t); ev.Result != "allowed_list" || ev.Limit != "phones" {
				t.Fatalf("the phone with its token: event %+v", ev)
			}
			// a device deny list, too, matches only the proven device: its
			// bare id is limited like any request (7.1)
			expect(t, f.do(t, "POST", "/v1/check", `{"endpoint":"GET /","ip":"198.51.100.10","device_id":"stolen-phone"}`), 200, "", "X-RateLimit-Remaining", "4")
			stolen := attrTokens.Issue("stolen-phone", t0.Add(time.Hour))
			expect(t, f.do(t, "POST", "/v1/check", `{"endpoint":"GET /","ip":"198.51.100.10","device_id":"stolen-phone","device_token":"`+stolen+`"}`), 403,
				`{"error":{"code":"DENIED","message":"Request denied","details":{"list":"stolen"},"request_id":"req-1"}}`, "X-RateLimit-Limit", "")
			for list, want := range map[string]float64{"blocked|denied_list": 3, "stolen|denied_list": 1, "staff|allowed_list": 8, "internal|allowed_list": 8} {
				name, result, _ := strings.Cut(list, "|")
				if got := testutil.ToFloat64(f.metrics.Decisions.WithLabelValues(name, "write", result)); got != want {
					t.Errorf("%s: %v, want %v", list, got, want)
				}
			}
		})
	}
}

func TestReportAttributesAndLists(t *testing.T) {
	t.Parallel()
	f := newAttrFixture(t, false)
	expect(t, f.do(t, "POST", "/v1/report", `{"type":"login_failed","account":"bob","attributes":{"plan":"free"}}`), 202, "")
	expect(t, f.do(t, "POST", "/v1/report", `{"type":"login_failed","account":"Alice@example.com"}`), 202, "")
	expect(t, f.do(t, "POST", "/v1/report", `{"type":"login_failed","account":"carol","ip":"203.0.113.1","attributes":{"tenant":"tollgate-dev"}}`), 202, "")
	// a device allow list matches only the proven device (7.1)
	tok := attrTokens.Issue("vip-phone", t0.Add(time.Hour))
	expect(t, f.do(t, "POST", "/v1/report", `{"type":"login_failed","account":"bob","device_id":"vip-phone"}`), 202, "")
	expect(t, f.do(t, "POST", "/v1/report", `{"type":"login_failed","account":"bob","device_id":"vip-phone","device_token":"`+tok+`"}`), 202, "")
	// and so does a device deny list: a staff report naming the denied
	// phone's bare id is marked allow-listed, with its token it is not
	stolen := attrTokens.Issue("stolen-phone", t0.Add(time.Hour))
	expect(t, f.do(t, "POST", "/v1/report", `{"type":"login_failed","account":"Alice@example.com","device_id":"stolen-phone"}`), 202, "")
	expect(t, f.do(t, "POST", "/v1/report", `{"type":"login_failed","account":"Alice@example.com","device_id":"stolen-phone","device_token":"`+stolen+`"}`), 202, "")
	w := f.do(t, "POST", "/v1/report", `{"type":"login_failed","account":"bob","attributes":{"Plan":"free"}}`)
	if w.Code != 400 || !strings.Contains(w.Body.String(), `\"Plan\" is not a valid attribute name`) {
		t.Fatalf("bad attribute: %d %s", w.Code, w.Body)
	}
	f.reporter.mu.Lock()
	defer f.reporter.mu.Unlock()
	if len(f.reporter.list) != 7 {
		t.Fatalf("reports %+v", f.reporter.list)
	}
	r := f.reporter.list
	if r[0].Attributes["plan"] != "free" || r[0].AllowList != "" {
		t.Errorf("report 0 %+v", r[0])
	}
	if r[1].AllowList != "staff" {
		t.Errorf("report 1: allow list %q, want staff", r[1].AllowList)
	}
	if r[2].AllowList != "" { // on the deny list too: deny wins
		t.Errorf("report 2: allow list %q", r[2].AllowList)
	}
	if r[3].AllowList != "" || r[3].Attested {
		t.Errorf("report 3 (the phone's id without its token): allow list %q attested %v", r[3].AllowList, r[3].Attested)
	}
	if r[4].AllowList != "phones" || !r[4].Attested {
		t.Errorf("report 4 (the phone with its token): allow list %q attested %v, want phones", r[4].AllowList, r[4].Attested)
	}
	// a proven device's report carries its token's expiry, riskd's measure
	// of when it was issued (7.1); an unproven one's none
	if !r[3].TokenExpires.IsZero() || !r[4].TokenExpires.Equal(t0.Add(time.Hour)) {
		t.Errorf("token expiries of reports 3, 4: %v, %v, want none, %v", r[3].TokenExpires, r[4].TokenExpires, t0.Add(time.Hour))
	}
	if r[5].AllowList != "staff" {
		t.Errorf("report 5 (staff naming the denied phone's bare id): allow list %q, want staff", r[5].AllowList)
	}
	if r[6].AllowList != "" || !r[6].Attested { // the proven denied phone: deny wins
		t.Errorf("report 6 (staff with the denied phone's token): allow list %q attested %v", r[6].AllowList, r[6].Attested)
	}
}

func TestProxyAttributesAndLists(t *testing.T) {
	t.Parallel()
	p := loadAttrPolicy(t)
	seen := make(chan *http.Request, 100)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r
		w.WriteHeader(204)
	}))
	t.Cleanup(up.Close)
	events, reporter := &sink{}, &fakeReporter{}
	eng, _ := engine.New(engine.Options{Store: bucket.NewMemoryStore(bucket.MemoryOptions{}), Policy: func() *policy.Policy { return p }})
	srv, _ := New(Options{Engine: eng, Events: events, Reporter: reporter,
		DeviceTokens: func() *attestation.Tokens { return attrTokens }})
	u, _ := url.Parse(up.URL)
	if err := srv.EnableProxy(ProxyOptions{Upstream: u}); err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(srv.Public())
	t.Cleanup(front.Close)
	send := func(method, path string, hdr http.Header) *http.Response {
		req, _ := http.NewRequest(method, front.URL+path, nil)
		req.Header = hdr
		resp, err := front.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	do := func(hdr http.Header) *http.Response { return send("GET", "/feed", hdr) }
	free := http.Header{"X-Plan": {"free"}, "X-Tenant": {"acme"}}
	for i := 0; i < 2; i++ {
		if resp := do(free); resp.StatusCode != 204 || resp.Header.Get("X-RateLimit-Limit") != "2" {
			t.Fatalf("free %d: %d %v", i, resp.StatusCode, resp.Header)
		}
		if r := <-seen; r.Header.Get("X-Plan") != "free" {
			t.Fatalf("upstream saw %v", r.Header)
		}
	}
	if ev := events.last(t); ev.Attributes["plan"] != "free" || ev.Attributes["tenant"] != "acme" {
		t.Fatalf("event %+v", ev)
	}
	if resp := do(free); resp.StatusCode != 429 {
		t.Fatalf("third free: %d", resp.StatusCode)
	}
	if resp := do(http.Header{"X-Plan": {"free", "paid"}}); resp.StatusCode != 400 {
		t.Fatalf("repeated X-Plan: %d", resp.StatusCode)
	}
	// repeated in another spelling (CGI, WSGI and Rack read X_Plan as
	// X-Plan): 400 as for the identity headers (6.9, 6.4), nothing forwarded
	for _, other := range []string{"X_Plan", "x_plan", "X_PLAN"} {
		if resp := do(http.Header{"X-Plan": {"free"}, other: {"enterprise"}}); resp.StatusCode != 400 {
			t.Fatalf("X-Plan and %s: %d", other, resp.StatusCode)
		}
	}
	if resp := do(http.Header{"X_Tenant": {"acme"}, "X-Tenant": {"acme"}}); resp.StatusCode != 400 {
		t.Fatalf("X-Tenant and X_Tenant: %d", resp.StatusCode)
	}
	select {
	case r := <-seen:
		t.Fatalf("a repeated attribute header was forwarded: %v", r.Header)
	default:
	}
	if resp := do(http.Header{"X-Tenant": {strings.Repeat("t", 257)}}); resp.StatusCode != 400 {
		t.Fatalf("long X-Tenant: %d", resp.StatusCode)
	}
	// the internal tenant is allowed past the exhausted free-plan limit
	if resp := do(http.Header{"X-Plan": {"free"}, "X-Tenant": {"tollgate-dev"}}); resp.StatusCode != 204 {
		t.Fatalf("internal tenant: %d", resp.StatusCode)
	}
	<-seen
	if ev := events.last(t); ev.Result != "allowed_list" || ev.Limit != "internal" {
		t.Fatalf("event %+v", ev)
	}
	select {
	case r := <-seen:
		t.Fatalf("denied request reached the upstream: %v", r.URL)
	default:
	}
	// Login outcomes carry the attributes; a staff account's is marked, a
	// proven device's carries its token's expiry (7.1).
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	phone := http.Header{"X-Device-Id": {"vip-phone"}, "X-Device-Token": {attrTokens.Issue("vip-phone", exp)}}
	for _, acct := range []string{"bob", "Alice@example.com", "carol"} {
		h := http.Header{"X-Plan": {"trial"}, "X-Account": {acct}}
		if acct == "carol" {
			maps.Copy(h, phone)
		}
		if resp := send("POST", "/auth/login", h); resp.StatusCode != 204 {
			t.Fatalf("login %s: %d", acct, resp.StatusCode)
		}
		<-seen
	}
	srv.WaitReports()
	reporter.mu.Lock()
	defer reporter.mu.Unlock()
	if len(reporter.list) != 3 {
		t.Fatalf("reports %+v", reporter.list)
	}
	for _, r := range reporter.list { // published concurrently: any order
		acct := policy.NormalizeAccount(r.Account)
		want := map[string]string{"bob": "", "alice@example.com": "staff", "carol": "phones"}[acct]
		if r.Type != streams.ReportLoginSucceeded || r.Attributes["plan"] != "trial" || r.AllowList != want {
			t.Errorf("report %+v", r)
		}
		if proven := acct == "carol"; r.Attested != proven || (proven && !r.TokenExpires.Equal(exp)) || (!proven && !r.TokenExpires.IsZero()) {
			t.Errorf("report of %s: attested %v, token expires %v (want %v)", acct, r.Attested, r.TokenExpires, exp)
		}
	}
}
