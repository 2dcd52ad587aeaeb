package api

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/streams"
)

// Auditor publishes admin changes (contract 6.5): *streams.Publisher.
type Auditor interface {
	// Audit publishes a on <prefix>audit.<action> and returns once it is
	// acknowledged.
	Audit(ctx context.Context, a *streams.Audit) error
}

// Admin listing bounds (?limit=).
const (
	// DefaultListLimit is the entries GET /v1/admin/lockouts and
	// /v1/admin/multipliers return without ?limit=.
	DefaultListLimit = 100
	// MaxListLimit is the largest ?limit= accepted.
	MaxListLimit = 10_000
)

// record logs an admin change and publishes it as an audit event. It
// reports false after answering 503 when the event could not be published:
// the change is in force but unrecorded (riskd may undo a lift, and will
// not re-apply the multiplier after a Redis loss), so the operator retries.
func (s *Server) record(w http.ResponseWriter, r *http.Request, rid string, a *streams.Audit) bool {
	a.V, a.AuditID, a.TS = streams.SchemaVersion, ulid.Make().String(), s.o.Now().UTC()
	a.RequestID, a.RemoteAddr = rid, r.RemoteAddr
	if ip, _ := clientIP(r, s.o.Engine.Policy().Identity.TrustedProxies); ip.IsValid() {
		a.ClientIP = ip.String() // behind a balancer the peer is the balancer
	}
	attrs := []slog.Attr{slog.String("action", a.Action), slog.String("subject", a.Subject), slog.String("id", a.ID),
		slog.String("ttl", a.TTL), slog.String("reason", a.Reason), slog.String("request_id", rid), slog.String("remote_addr", a.RemoteAddr),
		slog.String("client_ip", a.ClientIP)}
	if a.Value != nil {
		attrs = append(attrs, slog.Float64("value", *a.Value))
	}
	if a.Cleared != nil {
		attrs = append(attrs, slog.Bool("cleared", *a.Cleared))
	}
	if s.o.Audit == nil {
		s.o.Logger.LogAttrs(r.Context(), slog.LevelInfo, "admin: "+a.Action, attrs...)
		return true
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if err := s.o.Audit.Audit(ctx, a); err != nil {
		attrs = append(attrs, slog.String("err", err.Error()))
		s.o.Logger.LogAttrs(r.Context(), slog.LevelError, "admin: "+a.Action+" in force but not recorded on NATS", attrs...)
		w.Header().Set("Retry-After", "1")
		writeError(w, rid, &apiError{status: http.StatusServiceUnavailable, code: CodeLimiterUnavailable,
			message: "the change is in force but could not be published as audit." + a.Action + "; retry it", details: `"retry_after_ms":1000`})
		return false
	}
	s.o.Logger.LogAttrs(r.Context(), slog.LevelInfo, "admin: "+a.Action, attrs...)
	return true
}

// listLimit reads ?limit= (default DefaultListLimit).
func listLimit(r *http.Request) (int, *apiError) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return DefaultListLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxListLimit {
		return 0, badRequest("query parameter \"limit\" must be a whole number from 1 to " + strconv.Itoa(MaxListLimit))
	}
	return n, nil
}

// lockEntryView is one entry of GET /v1/admin/lockouts.
type lockEntryView struct {
	Subject   string `json:"subject"`
	ID        string `json:"id"`
	Kind      string `json:"kind"`
	Rule      string `json:"rule"`
	ExpiresAt string `json:"expires_at"`
	SetAt     string `json:"set_at"`
}

// multiplierEntryView is one entry of GET /v1/admin/multipliers.
type multiplierEntryView struct {
	Subject   string  `json:"subject"`
	ID        string  `json:"id"`
	Source    string  `json:"source"`
	Value     float64 `json:"value"`
	ExpiresAt *string `json:"expires_at"`
	Reason    string  `json:"reason"`
	SetAt     string  `json:"set_at"`
}

// handleListLockouts serves GET /v1/admin/lockouts: the lockouts and
// step-up requirements in force (every subject kind: account, ip, user,
// device), newest first.
func (s *Server) handleListLockouts(w http.ResponseWriter, r *http.Request, rid string) {
	limit, aerr := listLimit(r)
	if aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	locks, err := s.o.Store.ListLocks(r.Context(), limit)
	if err != nil {
		s.storeError(w, rid, err)
		return
	}
	out := make([]lockEntryView, 0, len(locks))
	for _, e := range locks {
		out = append(out, lockEntryView{Subject: e.Subject.Kind, ID: e.Subject.ID, Kind: e.Lock.Kind, Rule: e.Lock.Rule,
			ExpiresAt: rfc3339(e.Lock.Until), SetAt: rfc3339(e.SetAt)})
	}
	writeJSON(w, http.StatusOK, out)
}

// handleListMultipliers serves GET /v1/admin/multipliers: every stored
// multiplier in force (admin, velocity, anomaly), newest first.
func (s *Server) handleListMultipliers(w http.ResponseWriter, r *http.Request, rid string) {
	limit, aerr := listLimit(r)
	if aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	ms, err := s.o.Store.ListMultipliers(r.Context(), limit)
	if err != nil {
		s.storeError(w, rid, err)
		return
	}
	out := make([]multiplierEntryView, 0, len(ms))
	for _, e := range ms {
		v := multiplierEntryView{Subject: e.Subject.Kind, ID: e.Subject.ID, Source: e.Multiplier.Source, Value: e.Multiplier.Value,
			Reason: e.Multiplier.Reason, SetAt: rfc3339(e.SetAt)}
		if !e.Multiplier.ExpiresAt.IsZero() {
			t := rfc3339(e.Multiplier.ExpiresAt)
			v.ExpiresAt = &t
		}
		out = append(out, v)
	}
	writeJSON(w, http.StatusOK, out)
}

// computed returns the multipliers of the subject that the limiter
// computes per request rather than stores (6.5): reputation for ip and
// asn subjects, and for devices "unverified" (requests without a valid
// device token) and "attestation" (requests with one, while the device's
// attestation is valid at now, the store's clock; attest is its view).
func (s *Server) computed(subject, id string, attest any, now time.Time) []bucket.Multiplier {
	var out []bucket.Multiplier
	switch subject {
	case "ip":
		if ip, err := netip.ParseAddr(id); err == nil {
			if res := s.o.Engine.Reputation().Lookup(ip); res.IPRule >= 0 {
				out = append(out, bucket.Multiplier{Source: "reputation", Value: res.IP, Reason: res.IPReason})
			}
		}
	case "asn":
		if n, err := strconv.ParseUint(id, 10, 32); err == nil {
			if m, reason, ok := s.o.Engine.Reputation().ASN(uint32(n)); ok {
				out = append(out, bucket.Multiplier{Source: "reputation", Value: m, Reason: reason})
			}
		}
	case "device":
		a := s.o.Engine.Policy().Risk.Attestation
		if a == nil {
			break
		}
		if a.UnverifiedSet {
			out = append(out, bucket.Multiplier{Source: "unverified", Value: a.UnverifiedMultiplier,
				Reason: "requests without a valid device token (risk.attestation.unverified_multiplier)"})
		}
		if v, ok := attest.(attestationView); ok && v.Verified {
			exp, err := time.Parse(time.RFC3339, v.ExpiresAt)
			if err == nil && exp.After(now) {
				out = append(out, bucket.Multiplier{Source: "attestation", Value: a.VerifiedMultiplier, ExpiresAt: exp,
					Reason: "requests presenting a valid device token (risk.attestation.verified_multiplier)"})
			}
		}
	}
	return out
}

// effective returns the subject's effective multiplier for a request
// without a device token (stored and computed multipliers but
// "attestation"), with one (nil unless an "attestation" entry is
// computed), and every multiplier that applies, stored then computed, at
// now (the store's clock).
func (s *Server) effective(stored, computed []bucket.Multiplier, now time.Time) (float64, *float64, []bucket.Multiplier) {
	all := make([]bucket.Multiplier, 0, len(stored)+len(computed))
	for _, m := range stored {
		if m.Source != "attestation" { // left by the first edition: ignored by the store too
			all = append(all, m)
		}
	}
	all = append(all, computed...)
	var without, with []bucket.Multiplier
	attested := false
	for _, m := range all {
		switch m.Source {
		case "attestation":
			attested = true
			with = append(with, m)
		case "unverified":
			without = append(without, m)
		default:
			without = append(without, m)
			with = append(with, m)
		}
	}
	eff := bucket.Effective(without, now)
	if !attested {
		return eff, nil, all
	}
	w := bucket.Effective(with, now)
	return eff, &w, all
}
