package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// auditLog records audit events, or fails them.
type auditLog struct {
	mu   sync.Mutex
	list []streams.Audit
	fail bool
}

func (a *auditLog) Audit(_ context.Context, ev *streams.Audit) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail {
		return errors.New("streams: not connected to NATS")
	}
	a.list = append(a.list, *ev)
	return nil
}

// TestAdminAudit (6.5): every admin change is published with the
// contract's fields; a change whose event cannot be published answers 503
// naming the action; the listings are newest first with ?limit=.
func TestAdminAudit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "tok")
	audit := &auditLog{}
	f.srv.o.Audit = audit
	auth := []string{"Authorization", "Bearer tok"}
	expect(t, f.do(t, "PUT", "/v1/admin/multipliers/ip/192.0.2.1", `{"multiplier":0.1,"ttl":"10m","reason":"ticket 7"}`, auth...), 200, "")
	f.now = f.now.Add(time.Second)
	expect(t, f.do(t, "PUT", "/v1/admin/multipliers/user/u1", `{"multiplier":2}`, auth...), 200, "")
	expect(t, f.do(t, "DELETE", "/v1/admin/multipliers/user/u1", "", auth...), 200, "")
	_ = f.store.SetLock(context.Background(), bucket.Subject{Kind: "account", ID: "dave"}, bucket.Lock{Kind: "lockout", Rule: "r", Until: f.now.Add(time.Hour)})
	expect(t, f.do(t, "DELETE", "/v1/admin/lockouts/dave", "", auth...), 200, "")
	if len(audit.list) != 4 {
		t.Fatalf("audit events %+v", audit.list)
	}
	b, _ := json.Marshal(audit.list[0])
	for _, want := range []string{`"ts":"2024-04-19T10:30:00Z"`, `"action":"multiplier_set"`, `"subject":"ip"`, `"id":"192.0.2.1"`, `"value":0.1`,
		`"ttl":"10m"`, `"expires_at":"2024-04-19T10:40:00Z"`, `"reason":"ticket 7"`, `"request_id":"req-1"`, `"remote_addr":"192.0.2.1:1234"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("audit event %s lacks %s", b, want)
		}
	}
	if a := audit.list[2]; a.Action != streams.AuditMultiplierClear || a.Subject != "user" || a.ID != "u1" || a.Value != nil {
		t.Errorf("clear: %+v", a)
	}
	if a := audit.list[3]; a.Action != streams.AuditLockoutLift || a.ID != "dave" || a.Cleared == nil || !*a.Cleared {
		t.Errorf("lift: %+v", a)
	}

	expect(t, f.do(t, "GET", "/v1/admin/multipliers?limit=1", "", auth...), 200,
		`[{"subject":"ip","id":"192.0.2.1","source":"admin","value":0.1,"expires_at":"2024-04-19T10:40:00Z","reason":"ticket 7","set_at":"2024-04-19T10:30:00Z"}]`)
	expect(t, f.do(t, "GET", "/v1/admin/lockouts", "", auth...), 200, "[]")
	expect(t, f.do(t, "GET", "/v1/admin/lockouts?limit=x", "", auth...), 400, "")

	audit.fail = true
	w := f.do(t, "PUT", "/v1/admin/multipliers/ip/192.0.2.2", `{"multiplier":0.5}`, auth...)
	if w.Code != 503 || !strings.Contains(w.Body.String(), "could not be published as audit.multiplier_set; retry it") || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("unpublished change: %d %s", w.Code, w.Body)
	}
}

// TestAdminNeedsStore: an admin token without a store to administer is a
// configuration error, not a 500 at the first admin call.
func TestAdminNeedsStore(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "")
	if _, err := New(Options{Engine: f.srv.o.Engine, AdminToken: "tok"}); err == nil || !strings.Contains(err.Error(), "needs a store") {
		t.Fatalf("err = %v, want the admin API's missing store", err)
	}
}

// TestAdminTTLCountsFromStoreClock (issue 12): an admin multiplier's ttl
// runs from the store's clock (Redis TIME in production), not the
// limiter host's, and the subject view judges expiry by it too.
func TestAdminTTLCountsFromStoreClock(t *testing.T) {
	t.Parallel()
	storeNow := t0.Add(time.Hour) // the store's clock is an hour ahead of the host's
	store := bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return storeNow }})
	f := newFixture(t, store, "tok")
	auth := []string{"Authorization", "Bearer tok"}
	expect(t, f.do(t, "PUT", "/v1/admin/multipliers/ip/192.0.2.1", `{"multiplier":0.1,"ttl":"10m"}`, auth...), 200, "")
	ms, err := store.Multipliers(context.Background(), bucket.Subject{Kind: "ip", ID: "192.0.2.1"})
	if err != nil || len(ms) != 1 || !ms[0].ExpiresAt.Equal(storeNow.Add(10*time.Minute)) {
		t.Fatalf("stored %+v, %v; want one expiring at the store's clock + 10m (%v)", ms, err, storeNow.Add(10*time.Minute))
	}
	view := func(want string) {
		t.Helper()
		w := f.do(t, "GET", "/v1/admin/subjects/ip/192.0.2.1", "", auth...)
		if w.Code != 200 || !strings.Contains(w.Body.String(), want) {
			t.Fatalf("subject view: %d %s; want %s", w.Code, w.Body, want)
		}
	}
	view(`"effective":0.1,`)
	storeNow = storeNow.Add(10 * time.Minute) // expired by the store's clock; the host's is still at t0
	view(`"effective":1,`)
}

// TestAdminJudgesAttestationByStoreClock: the device view says whether a
// device's attestation is in force (its "attestation" multiplier and
// effective_with_device_token) by the store's clock (Redis TIME in
// production), as the status key's own expiry is, not the limiter host's:
// with the store two hours ahead, a status ending in one hour by the
// host's clock is shown but not in force, one ending in three is.
func TestAdminJudgesAttestationByStoreClock(t *testing.T) {
	t.Parallel()
	p, err := policy.Parse("attest.yaml", []byte(testPolicy+"risk:\n  attestation: {verified_multiplier: 2.0, unverified_multiplier: 0.5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	host := t0
	store := bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return host.Add(2 * time.Hour) }})
	eng, err := engine.New(engine.Options{Store: store, Policy: func() *policy.Policy { return p }, Clock: func() time.Time { return host }})
	if err != nil {
		t.Fatal(err)
	}
	devices := attestation.NewMemoryDevices(0, func() time.Time { return host })
	srv, err := New(Options{Engine: eng, AdminToken: "tok", Store: store, Now: func() time.Time { return host },
		Attestation: func(ctx context.Context, id string) (any, error) { return AttestationView(ctx, devices, id) }})
	if err != nil {
		t.Fatal(err)
	}
	srv.SetState("ready")
	for _, c := range []struct {
		id      string
		ends    time.Duration // after the host's clock
		inForce bool
	}{{"d-1h", time.Hour, false}, {"d-3h", 3 * time.Hour, true}} {
		st := attestation.Status{Platform: "ios", Verified: true, VerifiedAt: host, ExpiresAt: host.Add(c.ends)}
		if err := devices.Put(context.Background(), c.id, st); err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest("GET", "/v1/admin/subjects/device/"+c.id, nil)
		r.Header.Set("Authorization", "Bearer tok")
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		body := w.Body.String()
		shown := strings.Contains(body, `"attestation":{"platform":"ios","verified":true`)
		listed := strings.Contains(body, `"source":"attestation"`)
		counted := strings.Contains(body, `"effective_with_device_token":2,`)
		if w.Code != 200 || !shown || listed != c.inForce || counted != c.inForce {
			t.Fatalf("%s: %d %s; want the attestation shown, in force=%v", c.id, w.Code, body, c.inForce)
		}
	}
}
