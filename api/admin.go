package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// AdminStore is what the admin API needs of a bucket store: its
// subject-level operations (bucket.Admin); the store builds every key.
type AdminStore interface {
	SetMultiplier(ctx context.Context, s bucket.Subject, m bucket.Multiplier) error
	ClearMultiplier(ctx context.Context, s bucket.Subject, source string) error
	Multipliers(ctx context.Context, s bucket.Subject) ([]bucket.Multiplier, error)
	ClearLock(ctx context.Context, s bucket.Subject) (bool, error)
	Locks(ctx context.Context, s bucket.Subject) ([]bucket.Lock, error)
	ListLocks(ctx context.Context, limit int) ([]bucket.LockEntry, error)
	ListMultipliers(ctx context.Context, limit int) ([]bucket.MultiplierEntry, error)
	Now(ctx context.Context) (time.Time, error)
	// TrustAdmin lists and revokes accounts' trusted devices (7.1).
	bucket.TrustAdmin
}

// subjects are the subject kinds multipliers attach to.
var subjects = map[string]bool{"ip": true, "user": true, "device": true, "account": true, "asn": true, bucket.ClaimKind: true}

// MaxMultiplier bounds an admin multiplier.
const MaxMultiplier = 1000

// MinTTL is the shortest ttl of an admin multiplier: a shorter one
// ("1ns", "999ms", a slip for "1m") would end before the answer, an
// audited change that changed nothing.
const MinTTL = time.Second

// MaxTTL bounds an admin multiplier's ttl.
const MaxTTL = 365 * 24 * time.Hour

// subjectPath validates {subject}/{id} of an admin path and returns the
// id in the form the check API keys it (canonicalID).
func subjectPath(r *http.Request) (subject, id string, aerr *apiError) {
	subject, id = r.PathValue("subject"), r.PathValue("id")
	if name, ok := strings.CutPrefix(subject, "attr:"); ok && policy.ValidAttrName(name) {
		// an attribute subject (7.4): the id is the attribute's value
		if msg := policy.CheckAttribute(name, id); msg != "" {
			return "", "", badRequest("id: " + msg)
		}
		return subject, id, nil
	}
	if !subjects[subject] {
		return "", "", &apiError{status: http.StatusBadRequest, code: CodeBadRequest, message: fmt.Sprintf("subject %q is not one of ip, user, device, account, asn, attr:NAME", clip(subject))}
	}
	id, aerr = canonicalID(subject, id)
	return subject, id, aerr
}

// canonicalID checks an admin id for its subject and returns it as the
// check API keys it (6.4): an ip as netip prints it (2001:DB8::1 is
// 2001:db8::1, ::ffff:192.0.2.1 is 192.0.2.1), an asn as its number
// (AS64500 is 64500), an account normalised (policy.NormalizeAccount).
func canonicalID(subject, id string) (string, *apiError) {
	switch subject {
	case "ip":
		a, err := netip.ParseAddr(id)
		if err != nil || a.Zone() != "" {
			return "", badRequest(fmt.Sprintf("id %q is not an IP address", clip(id)))
		}
		return a.Unmap().String(), nil
	case "asn":
		n := id
		if len(n) > 2 && strings.EqualFold(n[:2], "AS") {
			n = n[2:]
		}
		v, err := strconv.ParseUint(n, 10, 32)
		if err != nil {
			return "", badRequest(fmt.Sprintf("id %q is not an AS number (such as 64500 or AS64500)", clip(id)))
		}
		return strconv.FormatUint(v, 10), nil
	case "account":
		if printable(id) == "" { // else refused below: lower-casing would hide bad UTF-8; the length is judged normalised
			id = policy.NormalizeAccount(id)
		}
	}
	if id == "" {
		return "", badRequest("id is required")
	}
	if msg := CheckID(id); msg != "" {
		return "", badRequest("id " + msg)
	}
	return id, nil
}

type putMultiplier struct {
	Multiplier *float64 `json:"multiplier"`
	TTL        string   `json:"ttl"`
	Reason     string   `json:"reason"`
}

func (s *Server) handlePutMultiplier(w http.ResponseWriter, r *http.Request, rid string) {
	subject, id, aerr := s.multiplierPath(r)
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
	if aerr := unmarshalStrict(body, &req); aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	if k := repeatedField(body); k != "" {
		writeError(w, rid, badRequest(fmt.Sprintf("body: field %q is given more than once (in some spelling); send it once", clip(k))))
		return
	}
	if req.Multiplier == nil {
		writeError(w, rid, badRequest(`field "multiplier" is required`))
		return
	}
	if lit := multiplierText(body); policy.Underflows(lit, *req.Multiplier) {
		writeError(w, rid, badRequest(fmt.Sprintf(`field "multiplier" is too small: %s is no float64 but 0, which blocks (send 0 to block)`, clip(lit))))
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
	if *req.Multiplier == 0 {
		*req.Multiplier = 0 // -0 is 0: shown and recorded so, not as -0
	}
	m := bucket.Multiplier{Source: "admin", Value: *req.Multiplier, Reason: req.Reason}
	if req.TTL != "" {
		ttl, err := time.ParseDuration(req.TTL)
		if err != nil || ttl <= 0 || ttl > MaxTTL {
			writeError(w, rid, badRequest(`field "ttl" must be a positive duration such as "10m", at most 8760h`))
			return
		}
		if ttl < MinTTL {
			writeError(w, rid, badRequest(fmt.Sprintf(`field "ttl" must be at least 1s: %q would end before the answer`, clip(req.TTL))))
			return
		}
		now, err := s.o.Store.Now(r.Context()) // the clock the store judges expiry by
		if err != nil {
			s.storeError(w, rid, err)
			return
		}
		m.ExpiresAt = now.Add(ttl)
	}
	if err := s.o.Store.SetMultiplier(r.Context(), bucket.Subject{Kind: subject, ID: id}, m); err != nil {
		s.storeError(w, rid, err)
		return
	}
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

// repeatedField returns the second key of the JSON object body that
// names a field already named, in any spelling ("" when none):
// encoding/json matches names without regard to case and keeps the last
// value, so {"multiplier":0.5,"MULTIPLIER":0} would block a subject while
// a reviewer, or a log taking the first, read a halving. body is an
// object unmarshalStrict took: its keys are the few fields of the
// request, so the scan ends within a handful of keys.
func repeatedField(body []byte) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	var seen []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return ""
		}
		k, _ := t.(string)
		for _, s := range seen {
			if strings.EqualFold(s, k) {
				return k
			}
		}
		seen = append(seen, k)
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return ""
		}
	}
	return ""
}

// multiplierText is the text of the multiplier field of a PUT body that
// unmarshalStrict took ("" when it cannot be read again).
func multiplierText(body []byte) string {
	var raw struct {
		Multiplier json.RawMessage `json:"multiplier"`
	}
	_ = json.Unmarshal(body, &raw)
	return string(raw.Multiplier)
}

func (s *Server) handleDeleteMultiplier(w http.ResponseWriter, r *http.Request, rid string) {
	subject, id, aerr := s.multiplierPath(r)
	if aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	sub := bucket.Subject{Kind: subject, ID: id}
	// whether an admin multiplier is in force, for the record's "cleared"
	ms, err := s.o.Store.Multipliers(r.Context(), sub)
	if err != nil {
		s.storeError(w, rid, err)
		return
	}
	was := slices.ContainsFunc(ms, func(m bucket.Multiplier) bool { return m.Source == "admin" })
	if err := s.o.Store.ClearMultiplier(r.Context(), sub, "admin"); err != nil {
		s.storeError(w, rid, err)
		return
	}
	if !s.record(w, r, rid, &streams.Audit{Action: streams.AuditMultiplierClear, Subject: subject, ID: id, Cleared: &was}) {
		return
	}
	s.writeSubject(w, r, rid, subject, id)
}

func (s *Server) handleGetSubject(w http.ResponseWriter, r *http.Request, rid string) {
	subject, id, aerr := s.multiplierPath(r)
	if aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	s.writeSubject(w, r, rid, subject, id)
}

// handleDeleteLockout serves DELETE /v1/admin/lockouts/{account}, the
// lift of an account's lock (6.5).
func (s *Server) handleDeleteLockout(w http.ResponseWriter, r *http.Request, rid string) {
	account, aerr := canonicalID("account", r.PathValue("account"))
	if aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	if was, ok := s.liftLock(w, r, rid, "account", account, ""); ok {
		writeJSON(w, http.StatusOK, map[string]any{"account": account, "cleared": was, "request_id": rid})
	}
}

// handleDeleteSubjectLockout serves DELETE
// /v1/admin/lockouts/{subject}/{id}: the lift of the lock of any subject
// a velocity rule locks (7.1).
func (s *Server) handleDeleteSubjectLockout(w http.ResponseWriter, r *http.Request, rid string) {
	subject := r.PathValue("subject")
	if !lockSubjects[subject] {
		writeError(w, rid, badRequest(fmt.Sprintf("subject %q is not one of account, ip, user, device, claim", clip(subject))))
		return
	}
	id, whole, aerr := s.lockPath(r, subject)
	if aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	if was, ok := s.liftLock(w, r, rid, subject, id, whole); ok {
		writeJSON(w, http.StatusOK, map[string]any{"subject": subject, "id": id, "cleared": was, "request_id": rid})
	}
}

// lockPath returns the id of {id} of a lockout path of subject, in the
// form riskd locks it: an ip's as multiplierPath gives it (an IPv6
// address addresses its identity.ipv6_prefix, 7.1: rules by ip count and
// lock the prefix, 2001:db8:1:2::/64; the prefix itself is accepted
// too), others canonical. whole is the IPv6 address given, when it is
// not id: the previous release locked whole addresses, and such a lock
// holds until its rule's duration ends (docs/operations.md, upgrading).
func (s *Server) lockPath(r *http.Request, subject string) (id, whole string, aerr *apiError) {
	if subject != "ip" {
		id, aerr = canonicalID(subject, r.PathValue("id"))
		return id, "", aerr
	}
	if _, id, aerr = s.multiplierPath(r); aerr != nil {
		return "", "", aerr
	}
	if w, werr := canonicalID("ip", r.PathValue("id")); werr == nil && w != id {
		whole = w
	}
	return id, whole, nil
}

// lockSubjects are the subject kinds velocity rules lock (7.1); a claim
// is a device id as sent without its token, whose reports count apart.
var lockSubjects = map[string]bool{"account": true, "ip": true, "user": true, "device": true, bucket.ClaimKind: true}

// liftLock clears every lock of (subject, id), the subject's lock key and
// each class-restricted rule's own, and records the lift; it
// reports whether a lock was in force and false ok when it answered an
// error. The lift of a device clears its claim's lock too: the limiter
// answers both with scope "device". An ip's whole address (lockPath; ""
// for none) has its locks of the previous release cleared too; the
// audit event names id. riskd learns of the lift from the
// audit event: it resets the subject's velocity counts (a device's and
// its claim's) and never re-asserts the lock (6.5).
func (s *Server) liftLock(w http.ResponseWriter, r *http.Request, rid, subject, id, whole string) (was, ok bool) {
	for _, sid := range []string{id, whole} {
		if sid == "" {
			continue
		}
		for _, kind := range bucket.LockKinds(subject) {
			cleared, err := s.o.Store.ClearLock(r.Context(), bucket.Subject{Kind: kind, ID: sid})
			if err != nil {
				s.storeError(w, rid, err)
				return false, false
			}
			was = was || cleared
		}
	}
	return was, s.record(w, r, rid, &streams.Audit{Action: streams.AuditLockoutLift, Subject: subject, ID: id, Cleared: &was})
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
	// Lockout is the lock in force that lasts longest; Lockouts lists
	// every lock in force (a class-restricted rule's lock is kept apart
	// from the subject's other locks), longest first, and is left out
	// when none is.
	Lockout     *lockView  `json:"lockout"`
	Lockouts    []lockView `json:"lockouts,omitempty"`
	Attestation any        `json:"attestation"`
	// TrustedDevices lists an account's trusted devices in force, the
	// latest ending first (7.1; accounts only, [] when none).
	TrustedDevices *[]trustedView `json:"trusted_devices,omitempty"`
	// Warning says that no limit of the policy in force is keyed by the
	// subject's kind: its multipliers, effective included, change no
	// decision (a multiplier weighs only on the limits whose `by` names
	// its subject). "" (left out) otherwise.
	Warning   string `json:"warning,omitempty"`
	RequestID string `json:"request_id"`
}

// unkeyedWarning is the subject view's warning for subject when no limit
// of p is keyed by it ("" when one is).
func unkeyedWarning(p *policy.Policy, subject string) string {
	part := subject
	if subject == bucket.ClaimKind {
		part = "device" // a claim's multipliers weigh on the device limits
	}
	for i := range p.Limits {
		l := &p.Limits[i]
		for j := range l.By {
			if l.PartName(j) == part {
				return ""
			}
		}
	}
	return fmt.Sprintf("no limit of the policy in force is keyed by %s: multipliers on this subject change no decision (a multiplier weighs only on the limits whose by names its subject)", part)
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
	ctx := r.Context()
	ms, err := s.o.Store.Multipliers(ctx, bucket.Subject{Kind: subject, ID: id})
	if err != nil {
		s.storeError(w, rid, err)
		return
	}
	v := subjectView{Subject: subject, ID: id, Multipliers: []multiplierView{}, RequestID: rid,
		Warning: unkeyedWarning(s.o.Engine.Policy(), subject)}
	if subject == "device" && s.o.Attestation != nil {
		view, err := s.o.Attestation(ctx, id)
		if err != nil {
			s.storeError(w, rid, err)
			return
		}
		v.Attestation = view
	}
	now, err := s.o.Store.Now(ctx)
	if err != nil {
		s.storeError(w, rid, err)
		return
	}
	v.Effective, v.EffectiveWithToken, ms = s.effective(ms, s.computed(subject, id, v.Attestation, now), now)
	for _, m := range ms {
		mv := multiplierView{Source: m.Source, Value: m.Value, Reason: m.Reason}
		if !m.ExpiresAt.IsZero() {
			t := m.ExpiresAt.UTC().Format(time.RFC3339)
			mv.ExpiresAt = &t
		}
		v.Multipliers = append(v.Multipliers, mv)
	}
	if v.Lockouts, err = s.lockouts(r, subject, id); err != nil {
		s.storeError(w, rid, err)
		return
	}
	if len(v.Lockouts) > 0 {
		v.Lockout = &v.Lockouts[0]
	}
	if subject == "account" {
		ts, err := s.trustedDevices(r, id)
		if err != nil {
			s.storeError(w, rid, err)
			return
		}
		v.TrustedDevices = &ts
	}
	writeJSON(w, http.StatusOK, v)
}

// lockouts returns the views of the locks in force on the subject of
// the admin path, the longest lasting first (nil when none; a subject
// holds several when class-restricted rules lock it too): an ip's locks
// are kept under the id the view names (an IPv6 address's prefix, 7.1),
// and for an IPv6 address also under the address itself while the
// previous release's locks last (lockPath); a device's view shows its
// claim's locks when the device has none.
func (s *Server) lockouts(r *http.Request, subject, id string) ([]lockView, error) {
	if !lockSubjects[subject] {
		return nil, nil
	}
	ids := []string{id}
	if subject == "ip" {
		if _, whole, aerr := s.lockPath(r, subject); aerr == nil && whole != "" {
			ids = append(ids, whole)
		}
	}
	var ls []bucket.Lock
	for _, kind := range bucket.LockKinds(subject) {
		for _, sid := range ids {
			l, err := s.o.Store.Locks(r.Context(), bucket.Subject{Kind: kind, ID: sid})
			if err != nil {
				return nil, err
			}
			ls = append(ls, l...)
		}
		if len(ls) > 0 {
			break
		}
	}
	if len(ls) == 0 {
		return nil, nil
	}
	slices.SortStableFunc(ls, func(a, b bucket.Lock) int { return b.Until.Compare(a.Until) })
	out := make([]lockView, 0, len(ls))
	for _, l := range ls {
		out = append(out, lockView{Kind: l.Kind, Rule: l.Rule, ExpiresAt: l.Until.UTC().Format(time.RFC3339)})
	}
	return out, nil
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
