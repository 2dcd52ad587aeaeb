// Package health is the /healthz and /readyz of both daemons. /healthz
// answers 200 {"status":"ok"} while the process runs. /readyz answers the
// daemon's state, its role (riskd: leader or standby), each dependency's
// state and, when a dependency or part stops the daemon from doing its
// job, the causes:
//
//	{"status":"ready","role":"leader","dependencies":{"nats":"up","redis":"up"},"error":"..."}
//
// It answers 200 in the states "ready" and "standby" without a cause, and
// 503 otherwise ("starting", "draining", or "not_ready" with causes).
package health

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// Probe is what a daemon knows about itself when /readyz is asked.
type Probe struct {
	// Dependencies maps each dependency to "up", "down" or "disabled".
	Dependencies map[string]string
	// Causes, when not empty, make the daemon not ready ("not_ready",
	// 503); they are joined into the body's "error".
	Causes []string
	// Role, when set, is the body's "role" (riskd: "leader" or "standby").
	Role string
	// State, when set, overrides the state set with SetState (riskd:
	// "standby", "starting", "ready").
	State string
}

// Readiness serves /healthz and /readyz. Its zero value is not usable;
// use New. It is safe for concurrent use.
type Readiness struct {
	state atomic.Pointer[string]
	probe func(ctx context.Context) Probe
}

// New returns a Readiness in state, asking probe (nil: no dependencies)
// on each /readyz, with a one-second deadline.
func New(state string, probe func(ctx context.Context) Probe) *Readiness {
	r := &Readiness{probe: probe}
	r.SetState(state)
	return r
}

// SetState sets the state: "ready" and "standby" answer 200, others 503.
func (r *Readiness) SetState(s string) { r.state.Store(&s) }

// State returns the state set last.
func (r *Readiness) State() string { return *r.state.Load() }

// Healthz serves /healthz.
func Healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"status":"ok"}`+"\n")
}

// ServeHTTP serves /readyz without a request id.
func (r *Readiness) ServeHTTP(w http.ResponseWriter, req *http.Request) { r.Serve(w, req, "") }

// Serve serves /readyz; a requestID not "" is added to the body.
func (r *Readiness) Serve(w http.ResponseWriter, req *http.Request, requestID string) {
	var p Probe
	if r.probe != nil {
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		p = r.probe(ctx)
		cancel()
	}
	status := r.State()
	if p.State != "" {
		status = p.State
	}
	if len(p.Causes) > 0 {
		status = "not_ready"
	}
	b := []byte(`{"status":`)
	b = appendString(b, status)
	if p.Role != "" {
		b = append(b, `,"role":`...)
		b = appendString(b, p.Role)
	}
	b = append(b, `,"dependencies":{`...)
	keys := make([]string, 0, len(p.Dependencies))
	for k := range p.Dependencies {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, p.Dependencies[k])
	}
	b = append(b, '}')
	if len(p.Causes) > 0 {
		b = append(b, `,"error":`...)
		b = appendString(b, strings.Join(p.Causes, "; "))
	}
	if requestID != "" {
		b = append(b, `,"request_id":`...)
		b = appendString(b, requestID)
	}
	b = append(b, "}\n"...)
	w.Header().Set("Content-Type", "application/json")
	if status != "ready" && status != "standby" {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write(b)
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}
