package api

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
)

// TestAdminRuleKeyedLockouts: a class-restricted rule's lock, kept apart
// from the subject's lock (Lock.Own), is listed beside it, shown in the
// subject view (lockout: the one lasting longest; lockouts: all), and
// one DELETE (either path) lifts both.
func TestAdminRuleKeyedLockouts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, "tok")
	auth := []string{"Authorization", "Bearer tok"}
	ctx := context.Background()
	for _, tc := range []struct{ path, answer string }{
		{"/v1/admin/lockouts/account/alice", `{"cleared":true,"id":"alice","request_id":"req-1","subject":"account"}`},
		{"/v1/admin/lockouts/alice", `{"account":"alice","cleared":true,"request_id":"req-1"}`},
	} {
		path := tc.path
		alice := bucket.Subject{Kind: "account", ID: "alice"}
		if err := f.store.SetLock(ctx, alice, bucket.Lock{Kind: "lockout", Rule: "account-failures", Until: t0.Add(15 * time.Minute)}); err != nil {
			t.Fatal(err)
		}
		if err := f.store.SetLock(ctx, alice, bucket.Lock{Kind: "lockout", Rule: "otp-flood", Until: t0.Add(time.Hour), Own: true}); err != nil {
			t.Fatal(err)
		}
		expect(t, f.do(t, "GET", "/v1/admin/subjects/account/alice", "", auth...), 200,
			`{"subject":"account","id":"alice","effective":1,"multipliers":[],`+
				`"lockout":{"kind":"lockout","rule":"otp-flood","expires_at":"2024-04-19T11:30:00Z"},`+
				`"lockouts":[{"kind":"lockout","rule":"otp-flood","expires_at":"2024-04-19T11:30:00Z"},{"kind":"lockout","rule":"account-failures","expires_at":"2024-04-19T10:45:00Z"}],`+
				`"attestation":null,"trusted_devices":[],"request_id":"req-1"}`)
		w := f.do(t, "GET", "/v1/admin/lockouts", "", auth...)
		for _, want := range []string{`"subject":"account","id":"alice","kind":"lockout","rule":"account-failures"`,
			`"subject":"account","id":"alice","kind":"lockout","rule":"otp-flood"`} {
			if !strings.Contains(w.Body.String(), want) {
				t.Errorf("GET /v1/admin/lockouts = %s; lacks %s", w.Body, want)
			}
		}
		expect(t, f.do(t, "DELETE", path, "", auth...), 200, tc.answer)
		if ls, err := f.store.Locks(ctx, alice); err != nil || len(ls) != 0 {
			t.Fatalf("%s left locks %+v %v", path, ls, err)
		}
		if w := f.do(t, "GET", "/v1/admin/lockouts", "", auth...); strings.Contains(w.Body.String(), `"id":"alice"`) {
			t.Fatalf("GET /v1/admin/lockouts after %s = %s", path, w.Body)
		}
	}
}
