package api

import (
	"context"
	"encoding/json"
	"net/http"
)

// Trail reads the audit trail and the recent alerts back from NATS
// (contract 7.3): *streams.Trail.
type Trail interface {
	// Audits returns the newest admin changes, newest first, at most limit.
	Audits(ctx context.Context, limit int) ([]json.RawMessage, error)
	// Alerts returns the newest alerts, shadow ones included, newest
	// first, at most limit.
	Alerts(ctx context.Context, limit int) ([]json.RawMessage, error)
}

// handleAudit serves GET /v1/admin/audit: the audit events of 6.5 as
// published, newest first, at most ?limit= (default 100).
func (s *Server) handleAudit(w http.ResponseWriter, r *http.Request, rid string) {
	s.serveTrail(w, r, rid, "audit trail", false)
}

// handleAlerts serves GET /v1/admin/alerts: the alerts of 4.x as
// published (shadow ones with "shadow": true), newest first, at most
// ?limit= (default 100).
func (s *Server) handleAlerts(w http.ResponseWriter, r *http.Request, rid string) {
	s.serveTrail(w, r, rid, "alerts", true)
}

// serveTrail answers a read of the audit trail (or, with alerts, of the
// alerts): 503 when there is no trail or NATS does not answer.
func (s *Server) serveTrail(w http.ResponseWriter, r *http.Request, rid, what string, alerts bool) {
	limit, aerr := listLimit(r)
	if aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	if s.o.Trail == nil {
		writeError(w, rid, &apiError{status: http.StatusServiceUnavailable, code: CodeLimiterUnavailable, message: "the " + what + " is not available: no NATS"})
		return
	}
	read := s.o.Trail.Audits
	if alerts {
		read = s.o.Trail.Alerts
	}
	list, err := read(r.Context(), limit)
	if err != nil {
		s.o.Logger.Error("admin: read "+what, "err", err, "request_id", rid)
		w.Header().Set("Retry-After", "1")
		writeError(w, rid, &apiError{status: http.StatusServiceUnavailable, code: CodeLimiterUnavailable, message: "the " + what + " could not be read from NATS",
			details: `"retry_after_ms":1000`})
		return
	}
	if list == nil {
		list = []json.RawMessage{}
	}
	writeJSON(w, http.StatusOK, list)
}
