package api

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
)

// denialCases are decisions WriteDecision denies, with their envelopes.
func denialCases() []struct {
	name string
	d    engine.Decision
	want string
} {
	now := time.Unix(1_800_000_000, 0)
	lim := &policy.Limit{Name: `login "burst"`, By: []policy.KeyPart{policy.PartIP}}
	quota := &policy.Limit{Name: "daily", By: []policy.KeyPart{policy.PartIP}, Kind: policy.KindQuota}
	return []struct {
		name string
		d    engine.Decision
		want string
	}{
		{"limited", engine.Decision{Outcome: engine.Limited, Binding: lim, Limit: 5, Reset: now.Add(time.Minute), Now: now, RetryAfter: 1500 * time.Millisecond},
			`{"error":{"code":"RATE_LIMITED","message":"Too many requests","details":{"retry_after_ms":1500,"limit":"login \"burst\"","scope":"ip"},"request_id":"r1"}}` + "\n"},
		{"limited quota", engine.Decision{Outcome: engine.Limited, Binding: quota, Limit: 5, Reset: now.Add(time.Hour), Now: now, RetryAfter: time.Hour},
			`{"error":{"code":"RATE_LIMITED","message":"Too many requests","details":{"retry_after_ms":3600000,"limit":"daily","scope":"ip","kind":"quota"},"request_id":"r1"}}` + "\n"},
		{"limited without binding", engine.Decision{Outcome: engine.Limited, RetryAfter: time.Millisecond},
			`{"error":{"code":"RATE_LIMITED","message":"Too many requests","details":{"retry_after_ms":1},"request_id":"r1"}}` + "\n"},
		{"locked", engine.Decision{Outcome: engine.Locked, Lock: bucket.Lock{Rule: "<brute>", Until: now.Add(time.Minute)}, LockScope: "account", RetryAfter: time.Minute},
			`{"error":{"code":"ACCOUNT_LOCKED","message":"Account temporarily locked after repeated failed logins","details":{"retry_after_ms":60000,"rule":"\u003cbrute\u003e","scope":"account"},"request_id":"r1"}}` + "\n"},
		{"step up", engine.Decision{Outcome: engine.StepUp, Lock: bucket.Lock{Rule: "r", Until: now.Add(time.Minute)}, LockScope: "ip"},
			`{"error":{"code":"STEP_UP_REQUIRED","message":"Additional verification required","details":{"rule":"r","scope":"ip","expires_at":"2027-01-15T08:01:00Z"},"request_id":"r1"}}` + "\n"},
		{"denied", engine.Decision{Outcome: engine.DeniedList, List: &policy.List{Name: "bad\nbots"}},
			`{"error":{"code":"DENIED","message":"Request denied","details":{"list":"bad\nbots"},"request_id":"r1"}}` + "\n"},
		{"unavailable", engine.Decision{Outcome: engine.Unavailable, RetryAfter: time.Second},
			`{"error":{"code":"LIMITER_UNAVAILABLE","message":"Rate limiter unavailable","details":{"retry_after_ms":1000},"request_id":"r1"}}` + "\n"},
	}
}

// TestWriteDecisionDenials pins each denial's envelope byte for byte,
// names that need escaping included.
func TestWriteDecisionDenials(t *testing.T) {
	for _, c := range denialCases() {
		t.Run(c.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			if WriteDecision(w, "r1", &c.d) {
				t.Fatal("a denial proceeds")
			}
			if got := w.Body.String(); got != c.want {
				t.Fatalf("body\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

// BenchmarkWriteDecisionDenials reports what each denial's answer costs.
func BenchmarkWriteDecisionDenials(b *testing.B) {
	for _, c := range denialCases() {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			w := httptest.NewRecorder()
			for b.Loop() {
				w.Body.Reset()
				clear(w.Header())
				WriteDecision(w, "r1", &c.d)
			}
		})
	}
}
