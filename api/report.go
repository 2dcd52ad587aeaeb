package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"

	"github.com/tollgate-dev/tollgate/signals"
	"github.com/tollgate-dev/tollgate/streams"
)

// DecisionSink receives every decision for publishing; it must not block.
type DecisionSink interface {
	Decision(d *streams.Decision)
}

// Reporter publishes a report and returns once it is accepted (acknowledged).
type Reporter interface {
	Report(ctx context.Context, r *streams.Report) error
}

// reportRequest is the body of POST /v1/report.
type reportRequest struct {
	Type     string  `json:"type"`
	Account  *string `json:"account"`
	IP       *string `json:"ip"`
	DeviceID *string `json:"device_id"`
	UserID   *string `json:"user_id"`
	// DeviceToken proves DeviceID attested (6.3): only then can a
	// login_succeeded enrol the device in the account's trusted devices.
	DeviceToken *string `json:"device_token"`
	// Attributes are the request's attributes (CONTRACT 6.9).
	Attributes map[string]string `json:"attributes"`
}

// decodeReport parses and validates a report body; token receives the
// device token presented ("" when none).
func decodeReport(body []byte, r *streams.Report, token *string) *apiError {
	var req reportRequest
	if aerr := unmarshalStrict(body, &req); aerr != nil {
		return aerr
	}
	switch {
	case req.Type == "":
		return badRequest(`field "type" is required`)
	case !policy.ValidEventType(req.Type):
		// any event type (7.4): otp_sent, signup, payment_declined, ...
		return badRequest(fmt.Sprintf(`field "type" must match [a-z][a-z0-9_]{0,63} (login_failed, otp_sent, ...), not %q`, clip(req.Type)))
	}
	*r = streams.Report{V: streams.SchemaVersion, Type: req.Type}
	normalizeAccount(&req.Account)
	*token = ""
	if req.DeviceToken != nil && len(*req.DeviceToken) <= MaxIDLen {
		*token = *req.DeviceToken
	}
	if aerr := copyIDs(idField{"account", req.Account, &r.Account}, idField{"device_id", req.DeviceID, &r.DeviceID},
		idField{"user_id", req.UserID, &r.UserID}); aerr != nil {
		return aerr
	}
	if req.IP != nil && *req.IP != "" {
		ip, err := netip.ParseAddr(*req.IP)
		if err != nil || ip.Zone() != "" {
			return badRequest(fmt.Sprintf(`field "ip" is not an IP address: %q`, clip(*req.IP)))
		}
		r.IP = ip.Unmap().String()
	}
	if len(req.Attributes) > 0 {
		if aerr := checkAttributes(req.Attributes); aerr != nil {
			return aerr
		}
		r.Attributes = req.Attributes
	}
	if r.Account == "" && r.IP == "" && r.DeviceID == "" && r.UserID == "" {
		return badRequest(`one of "account", "ip", "device_id", "user_id" is required`)
	}
	if r.Type == streams.ReportStepUpPassed && r.Account == "" {
		return badRequest(`field "account" is required for step_up_passed`)
	}
	return nil
}

// handleReport serves POST /v1/report: 202 once the report is accepted
// for publishing (acknowledged by JetStream), 503 when it cannot be.
func (s *Server) handleReport(w http.ResponseWriter, r *http.Request) {
	rid := requestID(w, r)
	body, aerr := readBody(r, nil)
	if aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	var rep streams.Report
	var token string
	if aerr := decodeReport(body, &rep, &token); aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	id, aerr := reportID(r.Header)
	if aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	if s.o.Reporter == nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, rid, &apiError{status: http.StatusServiceUnavailable, code: CodeLimiterUnavailable, message: "reports are not enabled (no NATS)", details: `"retry_after_ms":1000`})
		return
	}
	rep.ID = id
	rep.TS = s.o.Now().UTC()
	rep.Source = "api"
	rep.TokenExpires, rep.Attested = s.deviceToken(token, rep.DeviceID)
	rep.AllowList = s.allowList(&rep)
	rep.ASN = s.reportASN(rep.IP)
	if err := s.o.Reporter.Report(r.Context(), &rep); err != nil {
		s.o.Logger.Warn("report: publish", "request_id", rid, "err", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, rid, &apiError{status: http.StatusServiceUnavailable, code: CodeLimiterUnavailable, message: "report could not be published; retry", details: `"retry_after_ms":1000`})
		return
	}
	s.countReport(&rep)
	writeJSON(w, http.StatusAccepted, map[string]any{"accepted": true, "id": rep.ID, "request_id": rid})
}

// MaxIdempotencyKey bounds the Idempotency-Key of a report, in bytes.
const MaxIdempotencyKey = 255

// reportID returns the id a report is published under (its JetStream
// message id): a new ULID, or, when the request carries an
// Idempotency-Key header, "k" and the first 128 bits of the key's SHA-256
// in hex, so that a retry of a report (after a 503 whose report JetStream
// had stored all the same, its acknowledgement late) is stored once
// within the events stream's duplicate window. A key that is empty,
// longer than MaxIdempotencyKey, not visible ASCII or sent twice is 400.
func reportID(h http.Header) (string, *apiError) {
	vs := h.Values("Idempotency-Key")
	switch {
	case len(vs) == 0:
		return ulid.Make().String(), nil
	case len(vs) > 1:
		return "", badRequest(`header "Idempotency-Key" is sent more than once`)
	}
	k := vs[0]
	if k == "" || len(k) > MaxIdempotencyKey {
		return "", badRequest(fmt.Sprintf(`header "Idempotency-Key" must be 1-%d bytes`, MaxIdempotencyKey))
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x21 || c > 0x7e {
			return "", badRequest(`header "Idempotency-Key" must be visible ASCII`)
		}
	}
	sum := sha256.Sum256([]byte(k))
	return "k" + hex.EncodeToString(sum[:16]), nil
}

// countReport counts an accepted report in Options.Reports. Its type is
// labelled by the policy in force, so a client reporting made-up types
// grows one series ("other"), not one per type.
func (s *Server) countReport(rep *streams.Report) {
	if s.o.Reports != nil {
		s.o.Reports.WithLabelValues(s.o.Engine.Policy().EventLabel(rep.Type), rep.Source).Inc()
	}
}

// deviceVerified reports whether token is a valid device token of
// deviceID now (6.3). A missing, bad or expired token is simply false.
func (s *Server) deviceVerified(token, deviceID string) bool {
	_, ok := s.deviceToken(token, deviceID)
	return ok
}

// deviceToken returns the expiry of token and true when it proves
// deviceID now (deviceVerified); the zero time and false otherwise. A
// report carries the expiry, so riskd can tell a token issued before an
// admin revoked the device's trust (streams.Report.TokenExpires).
func (s *Server) deviceToken(token, deviceID string) (time.Time, bool) {
	if token == "" || deviceID == "" || s.o.DeviceTokens == nil {
		return time.Time{}, false
	}
	exp, ok := s.o.DeviceTokens().Expiry(token, deviceID)
	if !ok || !s.o.Now().Before(exp) {
		return time.Time{}, false
	}
	return exp, true
}

// reportASN returns the AS number of ip by the reputation rules in force
// ("" when unknown): velocity rules keyed by asn count it (7.4).
func (s *Server) reportASN(ip string) string {
	rules := s.o.Engine.Reputation()
	addr, err := netip.ParseAddr(ip)
	if rules == nil || err != nil {
		return ""
	}
	if res := rules.Lookup(addr); res.HasASN {
		return strconv.FormatUint(uint64(res.ASN), 10)
	}
	return ""
}

// allowList returns the allow list the report's identity is on ("" for
// none; a deny list wins, as for decisions). rep.Attested must be set: a
// device allow list matches only a proven device (7.1).
func (s *Server) allowList(rep *streams.Report) string {
	in := engine.Input{IP: rep.IP, UserID: rep.UserID, DeviceID: rep.DeviceID, DeviceVerified: rep.Attested,
		Account: rep.Account, Attributes: rep.Attributes}
	if l, deny := s.o.Engine.ListMatch(&in); l != nil && !deny {
		return l.Name
	}
	return ""
}

// handleOffenders serves GET /v1/admin/offenders.
func (s *Server) handleOffenders(w http.ResponseWriter, r *http.Request, rid string) {
	list := []signals.Offender{}
	if s.o.Offenders != nil {
		l, err := s.o.Offenders(r.Context())
		if err != nil {
			s.storeError(w, rid, err)
			return
		}
		if l != nil {
			list = l
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"offenders": list, "request_id": rid})
}
