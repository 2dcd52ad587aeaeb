package health

import (
	"context"
	"net/http/httptest"
	"testing"
)

// TestReadyz: 200 only in ready or standby without a cause; causes turn
// the status to not_ready; the body names the role, the dependencies in
// order, the causes and the request id.
func TestReadyz(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, state string
		probe       Probe
		rid         string
		code        int
		body        string
	}{
		{"ready", "ready", Probe{Dependencies: map[string]string{"redis": "up", "nats": "disabled"}}, "01X", 200,
			`{"status":"ready","dependencies":{"nats":"disabled","redis":"up"},"request_id":"01X"}`},
		{"starting", "starting", Probe{}, "", 503, `{"status":"starting","dependencies":{}}`},
		{"draining", "draining", Probe{}, "", 503, `{"status":"draining","dependencies":{}}`},
		{"standby", "x", Probe{State: "standby", Role: "standby"}, "", 200, `{"status":"standby","role":"standby","dependencies":{}}`},
		{"causes", "ready", Probe{State: "ready", Role: "leader", Dependencies: map[string]string{"redis": "down"}, Causes: []string{"redis unreachable: refused", "risk daemon failed: gone"}}, "", 503,
			`{"status":"not_ready","role":"leader","dependencies":{"redis":"down"},"error":"redis unreachable: refused; risk daemon failed: gone"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := New(c.state, func(context.Context) Probe { return c.probe })
			w := httptest.NewRecorder()
			r.Serve(w, httptest.NewRequest("GET", "/readyz", nil), c.rid)
			if w.Code != c.code || w.Body.String() != c.body+"\n" {
				t.Fatalf("%d %s; want %d %s", w.Code, w.Body.String(), c.code, c.body)
			}
		})
	}
}
