package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
)

// decodeRelease reads the body of POST /v1/release: {"lease_id": "..."},
// nothing else.
func decodeRelease(body []byte) (string, *apiError) {
	var req struct {
		LeaseID *string `json:"lease_id"`
	}
	if aerr := unmarshalStrict(body, &req); aerr != nil {
		return "", aerr
	}
	if req.LeaseID == nil || *req.LeaseID == "" {
		return "", badRequest("lease_id: required (the lease_id a check answered)")
	}
	return *req.LeaseID, nil
}

// handleRelease serves POST /v1/release: it frees the concurrency slots of
// a lease a check answered. 200 {"released": true} when the lease held a
// slot; 404 NOT_FOUND for an unknown, already released or expired lease
// (nothing is freed); 400 for a malformed one; 503 when the store cannot
// be reached.
func (s *Server) handleRelease(w http.ResponseWriter, r *http.Request) {
	rid := requestID(w, r)
	body, aerr := readBody(r, make([]byte, 0, 256))
	if aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	id, aerr := decodeRelease(body)
	if aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	ok, err := s.o.Engine.Release(r.Context(), id)
	switch {
	case errors.Is(err, engine.ErrBadLeaseID):
		writeError(w, rid, badRequest("lease_id: not a lease id a check answered"))
		return
	case err != nil:
		s.o.Logger.Warn("release: store", "request_id", rid, "err", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, rid, &apiError{status: http.StatusServiceUnavailable, code: CodeLimiterUnavailable, message: "Rate limiter unavailable",
			details: `"retry_after_ms":1000`})
		return
	case !ok:
		writeError(w, rid, &apiError{status: http.StatusNotFound, code: CodeNotFound, message: "no such lease (unknown, already released or expired)"})
		return
	}
	b := append([]byte(`{"released":true,"request_id":`), AppendJSONString(nil, rid)...)
	b = append(b, "}\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// releaseTimeout bounds a release made on a request's behalf after its
// answer (proxy mode), whose own context may be gone.
const releaseTimeout = 5 * time.Second

// releaseAfter frees the slots of decision d's lease (if it took any) once
// the request it admitted is done: the proxy calls it when the upstream's
// response has been sent or the client went away. A failure is logged;
// the lease then expires after its TTL.
func (s *Server) releaseAfter(rid string, d *engine.Decision) {
	id := d.LeaseID()
	if id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if _, err := s.o.Engine.Release(ctx, id); err != nil {
		s.o.Logger.Warn("proxy: release", "request_id", rid, "err", err)
	}
}

// concurrencyName names the first concurrency limit that applied to d.
func concurrencyName(d *engine.Decision) string {
	for _, l := range d.Applied() {
		if l.Kind == policy.KindConcurrency {
			return l.Name
		}
	}
	return ""
}
