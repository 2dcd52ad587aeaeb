package api

import (
	"net/http/httptest"
	"testing"
)

// TestForwardAuth403FormRefusals (6.10): with ?status=403 a request the
// limiter refuses (400) is a 403 carrying the real status and the
// envelope, as a denial is, because NGINX's auth_request answers any
// other status with a 500 of its own; without it, the refusal is a 400.
func TestForwardAuth403FormRefusals(t *testing.T) {
	t.Parallel()
	f := newForwardAuthFixture(t, nil)
	noMethod := `{"error":{"code":"BAD_REQUEST","message":"header X-Forwarded-Method is required (the original request's method)","details":{},"request_id":"req-1"}}`
	expect(t, f.do(t, "GET", "/v1/forward-auth", "", "X-Forwarded-Uri", "/feed"), 400, noMethod, "X-Tollgate-Status", "")
	expect(t, f.do(t, "GET", "/v1/forward-auth?status=403", "", "X-Forwarded-Uri", "/feed"), 403, noMethod,
		"X-Tollgate-Status", "400", "X-Tollgate-Envelope", noMethod, "Content-Type", "application/json")

	// a refusal any client can cause: its identity header twice (6.4)
	r := httptest.NewRequest("GET", "/v1/forward-auth?status=403", nil)
	r.Header.Set("X-Request-Id", "req-1")
	r.Header.Set("X-Forwarded-Method", "GET")
	r.Header.Set("X-Forwarded-Uri", "/feed")
	r.Header["X-User-Id"] = []string{"u_1", "u_2"}
	w := httptest.NewRecorder()
	f.srv.ServeHTTP(w, r)
	repeated := `{"error":{"code":"BAD_REQUEST","message":"header \"X-User-Id\" is given more than once (in some spelling); send it once","details":{},"request_id":"req-1"}}`
	expect(t, w, 403, repeated, "X-Tollgate-Status", "400", "X-Tollgate-Envelope", repeated)
}
