package api

import (
	"net/http"

	"github.com/tollgate-dev/tollgate/streams"
)

// handleForgetAttestation serves DELETE /v1/admin/attestations/{device_id}:
// the limiter forgets the device's attestation, in force or lapsed and
// held (docs/attestation.md), so that any genuine device may attest the
// id again. It is the way back for an owner who lost both the App Attest
// key and the last device token (a reinstall without the keychain), once
// an operator has checked them out of band. Device tokens handed out
// before stay valid until they expire. The id leaves the trusted devices
// of every account that trusted it (7.1): the next device to attest it
// must not inherit their trust. The change is audited
// (attestation_forget), and riskd drops the id from its record of trust.
func (s *Server) handleForgetAttestation(w http.ResponseWriter, r *http.Request, rid string) {
	id, aerr := canonicalID("device", r.PathValue("device_id"))
	if aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	if s.o.ForgetAttestation == nil {
		writeError(w, rid, &apiError{status: http.StatusNotFound, code: CodeNotFound, message: "attestation is not configured"})
		return
	}
	// the next device to attest the id must not inherit the trust the
	// accounts it logged in to gave it (7.1): untrusted before the id is
	// free, so no attestation of it can come between
	n, err := s.o.Store.UntrustDevice(r.Context(), id)
	if err != nil {
		s.storeError(w, rid, err)
		return
	}
	was, err := s.o.ForgetAttestation(r.Context(), id)
	if err != nil {
		s.storeError(w, rid, err)
		return
	}
	if s.record(w, r, rid, &streams.Audit{Action: streams.AuditAttestationForget, Subject: "device", ID: id, Cleared: &was, Untrusted: &n}) {
		writeJSON(w, http.StatusOK, struct {
			DeviceID  string `json:"device_id"`
			Cleared   bool   `json:"cleared"`
			Untrusted int    `json:"untrusted_accounts"`
			RequestID string `json:"request_id"`
		}{id, was, n, rid})
	}
}
