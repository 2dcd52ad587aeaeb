package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/streams"
)

// subjects are the subject kinds multipliers attach to.
var subjects = map[string]bool{"ip": true, "user": true, "device": true, "account": true, "asn": true}

// MaxMultiplier bounds an admin multiplier.
const MaxMultiplier = 1000

// MaxTTL bounds an admin multiplier's ttl.
const MaxTTL = 365 * 24 * time.Hour

// subjectPath validates {subject}/{id} of an admin path.
func subjectPath(r *http.Request) (subject, id string, aerr *apiError) {
	subject, id = r.PathValue("subject"), r.PathValue("id")
	if !subjects[subject] {
		return "", "", &apiError{status: http.StatusBadRequest, code: CodeBadRequest, message: fmt.Sprintf("subject %q is not one of ip, user, device, account, asn", clip(subject))}
	}
	if id == "" {
		return "", "", badRequest("id is required")
	}
	if msg := CheckID(id); msg != "" {
		return "", "", badRequest("id " + msg)
	}
	return subject, id, nil
}

type putMultiplier struct {
	Multiplier *float64 `json:"multiplier"`
	TTL        string   `json:"ttl"`
	Reason     string   `json:"reason"`
}

func (s *Server) handlePutMultiplier(w http.ResponseWriter, r *http.Request, rid string) {
	subject, id, aerr := subjectPath(r)
	if aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	body, aerr := readBody(r, nil)
	if aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	var req putMultiplier
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, rid, jsonError(err))
		return
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		writeError(w, rid, badRequest("body: unexpected data after the JSON object"))
		return
	}
	if req.Multiplier == nil {
		writeError(w, rid, badRequest(`field "multiplier" is required`))
		return
	}
	if v := *req.Multiplier; v < 0 || v > MaxMultiplier || math.IsNaN(v) {
		writeError(w, rid, badRequest(fmt.Sprintf(`field "multiplier" must be between 0 and %d`, MaxMultiplier)))
		return
	}
	if len(req.Reason) > 512 || printable(req.Reason) != "" {
		writeError(w, rid, badRequest(`field "reason" must be at most 512 bytes of printable UTF-8`))
		return
	}
	m := bucket.Multiplier{Source: "admin", Value: *req.Multiplier, Reason: req.Reason}
	if req.TTL != "" {
		ttl, err := time.ParseDuration(req.TTL)
		if err != nil || ttl <= 0 || ttl > MaxTTL {
			writeError(w, rid, badRequest(`field "ttl" must be a positive duration such as "10m", at most 8760h`))
			return
		}
		m.ExpiresAt = s.o.Now().Add(ttl)
	}
	e := s.o.Engine
	key := bucket.MultiplierKey(e.Prefix(), subject, id)
	if err := e.Store().SetMultiplier(r.Context(), key, m); err != nil {
		s.storeError(w, rid, err)
		return
	}
	e.Forget(key)
	a := &streams.Audit{Action: streams.AuditMultiplierSet, Subject: subject, ID: id, Value: &m.Value, TTL: req.TTL, Reason: req.Reason}
	if !m.ExpiresAt.IsZero() {
		exp := m.ExpiresAt.UTC()
		a.ExpiresAt = &exp
	}
	if !s.record(w, r, rid, a) {
		return
	}
	s.writeSubject(w, r, rid, subject, id)
}

func (s *Server) handleDeleteMultiplier(w http.ResponseWriter, r *http.Request, rid string) {
	subject, id, aerr := subjectPath(r)
	if aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	e := s.o.Engine
	key := bucket.MultiplierKey(e.Prefix(), subject, id)
	if err := e.Store().ClearMultiplier(r.Context(), key, "admin"); err != nil {
		s.storeError(w, rid, err)
		return
	}
	e.Forget(key)
	if !s.record(w, r, rid, &streams.Audit{Action: streams.AuditMultiplierClear, Subject: subject, ID: id}) {
		return
	}
	s.writeSubject(w, r, rid, subject, id)
}

func (s *Server) handleGetSubject(w http.ResponseWriter, r *http.Request, rid string) {
	subject, id, aerr := subjectPath(r)
	if aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	s.writeSubject(w, r, rid, subject, id)
}

func (s *Server) handleDeleteLockout(w http.ResponseWriter, r *http.Request, rid string) {
	account := r.PathValue("account")
	if msg := CheckID(account); msg != "" || account == "" {
		writeError(w, rid, badRequest("account is empty or "+msg))
		return
	}
	e := s.o.Engine
	key := bucket.LockKey(e.Prefix(), "account", account)
	was, err := e.Store().ClearLock(r.Context(), key)
	e.Forget(key)
	if err != nil {
		s.storeError(w, rid, err)
		return
	}
	// riskd learns of the lift from the audit event: it resets the
	// account's velocity counts and never re-asserts the lock (6.5).
	if !s.record(w, r, rid, &streams.Audit{Action: streams.AuditLockoutLift, Subject: "account", ID: account, Cleared: &was}) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"account": account, "cleared": was, "request_id": rid})
}

// subjectView is the body of GET /v1/admin/subjects/{subject}/{id}.
type subjectView struct {
	Subject   string  `json:"subject"`
	ID        string  `json:"id"`
	Effective float64 `json:"effective"`
	// EffectiveWithToken is the device's effective multiplier for requests
	// presenting a valid device token (devices with a valid attestation only).
	EffectiveWithToken *float64         `json:"effective_with_device_token,omitempty"`
	Multipliers        []multiplierView `json:"multipliers"`
	Lockout            *lockView        `json:"lockout"`
	Attestation        any              `json:"attestation"`
	RequestID          string           `json:"request_id"`
}

type multiplierView struct {
	Source    string  `json:"source"`
	Value     float64 `json:"value"`
	ExpiresAt *string `json:"expires_at"`
	Reason    string  `json:"reason"`
}

type lockView struct {
	Kind      string `json:"kind"`
	Rule      string `json:"rule"`
	ExpiresAt string `json:"expires_at"`
}

func (s *Server) writeSubject(w http.ResponseWriter, r *http.Request, rid, subject, id string) {
	e := s.o.Engine
	ctx := r.Context()
	ms, err := e.Store().Multipliers(ctx, bucket.MultiplierKey(e.Prefix(), subject, id))
	if err != nil {
		s.storeError(w, rid, err)
		return
	}
	v := subjectView{Subject: subject, ID: id, Multipliers: []multiplierView{}, RequestID: rid}
	if subject == "device" && s.o.Attestation != nil {
		view, _, err := s.o.Attestation(ctx, id)
		if err != nil {
			s.storeError(w, rid, err)
			return
		}
		v.Attestation = view
	}
	v.Effective, v.EffectiveWithToken, ms = s.effective(ms, s.computed(subject, id, v.Attestation))
	for _, m := range ms {
		mv := multiplierView{Source: m.Source, Value: m.Value, Reason: m.Reason}
		if !m.ExpiresAt.IsZero() {
			t := m.ExpiresAt.UTC().Format(time.RFC3339)
			mv.ExpiresAt = &t
		}
		v.Multipliers = append(v.Multipliers, mv)
	}
	if subject == "account" {
		l, ok, err := e.Store().GetLock(ctx, bucket.LockKey(e.Prefix(), "account", id))
		if err != nil {
			s.storeError(w, rid, err)
			return
		}
		if ok {
			v.Lockout = &lockView{Kind: l.Kind, Rule: l.Rule, ExpiresAt: l.Until.UTC().Format(time.RFC3339)}
		}
	}
	writeJSON(w, http.StatusOK, v)
}

// storeError answers a failed admin store call with 503.
func (s *Server) storeError(w http.ResponseWriter, rid string, err error) {
	s.o.Logger.Error("admin: store", "err", err, "request_id", rid)
	w.Header().Set("Retry-After", "1")
	writeError(w, rid, &apiError{status: http.StatusServiceUnavailable, code: CodeLimiterUnavailable, message: "store unavailable", details: `"retry_after_ms":1000`})
}

// writeJSON writes v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{}`)
	}
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
