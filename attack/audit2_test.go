package attack

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/tollgate-dev/tollgate/alerting"
	"github.com/tollgate-dev/tollgate/service"
)

// webhookSecretEnv names the signing secret of the audited webhook.
const webhookSecretEnv = "TOLLGATE_AUDIT_WEBHOOK_SECRET"

// hook is a webhook receiver that records every delivery.
type hook struct {
	srv *httptest.Server

	mu   sync.Mutex
	got  []delivery
	fail int // answer 503 to this many deliveries first
}

type delivery struct {
	header http.Header
	body   []byte
	at     time.Time
}

func newHook(t *testing.T, fail int) *hook {
	h := &hook{fail: fail}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.got = append(h.got, delivery{header: r.Header.Clone(), body: b, at: time.Now()})
		failing := h.fail > 0
		h.fail--
		h.mu.Unlock()
		if failing {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hook) deliveries() []delivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got)
}

// withAlerting appends an alerting section posting to url, signed with
// secret, to the policy both daemons read, and gives both the secret.
func withAlerting(url, secret string) (func(*service.RiskdConfig), setup) {
	getenv := func(k string) string {
		if k == webhookSecretEnv {
			return secret
		}
		return os.Getenv(k)
	}
	return func(rc *service.RiskdConfig) { rc.Getenv = getenv },
		func(c *service.Config) {
			f, err := os.OpenFile(c.ConfigPath, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				panic(err)
			}
			defer f.Close()
			if _, err := io.WriteString(f, "alerting:\n  webhooks:\n    - {url: \""+url+"\", secret_env: "+webhookSecretEnv+"}\n  retry_for: 1h\n"); err != nil {
				panic(err)
			}
			c.Getenv = getenv
		}
}

// TestAuditWebhookLockoutAlert (7.2, 4): a lockout fired by riskd reaches
// a signed webhook with the contract's fields; a receiver that answers
// 503 gets the delivery again, with the same delivery_id and a fresh,
// valid signature whose t is the attempt's time (a receiver's replay
// window holds for retries too).
func TestAuditWebhookLockoutAlert(t *testing.T) {
	t.Parallel()
	const secret = "whsec-audit"
	h := newHook(t, 1)
	rs, ls := withAlerting(h.srv.URL+"/hook", secret)
	tg := startWith(t, rs, ls)
	account := "victim-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	for i := 0; i < 10; i++ {
		if c, body := do(t, "POST", tg.api+"/v1/report", `{"type":"login_failed","account":"`+account+`"}`, bearer(apiToken)); c != 202 {
			t.Fatalf("report: %d %s", c, body)
		}
	}
	var ours []delivery
	eventually(t, 20*time.Second, func() string {
		ours = ours[:0]
		for _, d := range h.deliveries() {
			if strings.Contains(string(d.body), account) {
				ours = append(ours, d)
			}
		}
		if len(ours) < 2 {
			return "deliveries of the lockout: " + strconv.Itoa(len(ours))
		}
		return ""
	})
	var ids []string
	for i, d := range ours {
		sig := d.header.Get("X-Tollgate-Signature")
		at, err := alerting.Verify([]byte(secret), sig, d.body, d.at, 5*time.Minute)
		ok := err == nil
		if !ok {
			t.Fatalf("delivery %d: signature %q does not verify over t.body: %s", i, sig, d.body)
		}
		if d.at.Sub(at) > 2*time.Second || at.Sub(d.at) > time.Second {
			t.Errorf("delivery %d signed at %v, received %v", i, at, d.at)
		}
		var v map[string]any
		if err := json.Unmarshal(d.body, &v); err != nil {
			t.Fatalf("delivery %d: %v: %s", i, err, d.body)
		}
		for _, k := range []string{"ts", "kind", "subject", "id", "rule", "multiplier", "rate", "baseline", "expires_at", "delivery_id"} {
			if _, ok := v[k]; !ok {
				t.Errorf("delivery %d lacks %q: %s", i, k, d.body)
			}
		}
		if v["kind"] != "lockout" || v["subject"] != "account" || v["id"] != account || v["rule"] != "account-failures" {
			t.Errorf("delivery %d: %s", i, d.body)
		}
		for _, k := range []string{"ts", "expires_at"} {
			s, _ := v[k].(string)
			if ts, err := time.Parse(time.RFC3339, s); err != nil || !strings.HasSuffix(s, "Z") || ts.IsZero() {
				t.Errorf("delivery %d: %s %q is not an RFC 3339 UTC time", i, k, s)
			}
		}
		ids = append(ids, v["delivery_id"].(string))
	}
	if ids[0] == "" || ids[0] != ids[1] {
		t.Errorf("delivery ids across a retry: %q", ids)
	}
}

// TestAuditGRPCHeaderListBomb (7.5): HPACK lets a client repeat a header
// of its dynamic table for one byte a copy, and grpc-go keeps every
// copy of a call's metadata while the call waits for its message. With
// grpc-go's default bound on a header list (16 MiB decoded) 20 calls of
// 400,000 one-byte copies (7.8 MB sent) held 619 MiB of heap: a call
// whose header list is over the service's bound (a RateLimitRequest's
// headers are well under 1 KiB) is reset at once, and the other calls of
// its connection go on. (A header block that goes on in CONTINUATION
// frames past the bound ends the connection: x/net/http2 stops reading
// it.)
func TestAuditGRPCHeaderListBomb(t *testing.T) {
	t.Parallel()
	tg := start(t, withGRPC(t, 0))
	r := dialRaw(t, tg.grpc)
	rr := r.read()
	r.call(t, 1, feedCall("u_before_bomb"), "application/grpc")
	r.hbuf.Reset()
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
		{":authority", "tollgate"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = r.enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	for range 12000 { // 432 KB decoded from 12 KB, one HEADERS frame
		_ = r.enc.WriteField(hpack.HeaderField{Name: "x-a", Value: "b"})
	}
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: r.hbuf.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() string {
		if st := rr.result(3); !st.reset {
			return "the call of a 432 KB header list is not reset: " + describe(rr, st)
		}
		return ""
	})
	r.call(t, 5, feedCall("u_after_bomb"), "application/grpc")
	for _, id := range []uint32{1, 5} {
		eventually(t, 10*time.Second, func() string {
			if st := rr.result(id); st.grpcStatus != "0" {
				return "call " + strconv.Itoa(int(id)) + " is not answered OK: " + describe(rr, st)
			}
			return ""
		})
	}
}
