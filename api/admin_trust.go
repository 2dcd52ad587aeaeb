package api

import (
	"net/http"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/streams"
)

// trustedView is one trusted device of an account in its subject view.
type trustedView struct {
	DeviceID  string `json:"device_id"`
	ExpiresAt string `json:"expires_at"`
}

// trustedDevices returns the views of account's trusted devices in force,
// the latest ending first (7.1).
func (s *Server) trustedDevices(r *http.Request, account string) ([]trustedView, error) {
	ds, err := s.o.Store.TrustedDevices(r.Context(), bucket.Subject{Kind: "account", ID: account})
	if err != nil {
		return nil, err
	}
	out := make([]trustedView, 0, len(ds))
	for _, d := range ds {
		out = append(out, trustedView{DeviceID: d.Device, ExpiresAt: d.Until.UTC().Format(time.RFC3339)})
	}
	return out, nil
}

// handleRevokeTrust serves DELETE /v1/admin/trusted-devices/{account} and
// DELETE /v1/admin/trusted-devices/{account}/{device_id}: the device (or
// every device) is no longer a trusted device of the account (7.1), so
// it shares the account's budget of a `trusted_devices: own` limit and
// its exempt_attested lockouts hold it too: the way to disown a stolen
// phone, or every device of a compromised account. The device is trusted
// again only by a login_succeeded it proves after the revocation. The
// revocation is published as audit.trust_revoke, from which riskd drops
// the enrolments it records (it would write them back after a Redis
// loss); if the event cannot be published the answer is 503 with the
// revocation in force, to be retried.
func (s *Server) handleRevokeTrust(w http.ResponseWriter, r *http.Request, rid string) {
	account, aerr := canonicalID("account", r.PathValue("account"))
	if aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	device := ""
	if raw := r.PathValue("device_id"); raw != "" {
		if device, aerr = canonicalID("device", raw); aerr != nil {
			writeError(w, rid, aerr)
			return
		}
	}
	was, err := s.o.Store.Untrust(r.Context(), bucket.Subject{Kind: "account", ID: account}, device)
	if err != nil {
		s.storeError(w, rid, err)
		return
	}
	if !s.record(w, r, rid, &streams.Audit{Action: streams.AuditTrustRevoke, Subject: "account", ID: account, DeviceID: device, Cleared: &was}) {
		return
	}
	v := map[string]any{"account": account, "cleared": was, "request_id": rid}
	if device != "" {
		v["device_id"] = device
	}
	writeJSON(w, http.StatusOK, v)
}
