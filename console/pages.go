package console

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
)

// view is what a page template is given.
type view struct {
	Title       string
	Path        string // the page's path (the nav marks it; changes return to it)
	CSRF        string // "" on the pages shown without a session
	Flash       string
	FlashFailed bool
	Message     string // the sign-in and error pages' message
	Now         time.Time
	Refresh     int  // seconds between live refreshes (0: none)
	More        bool // a list page shows listLimit entries of more
	Error       string
	Data        any
}

// lockout is an entry of GET /v1/admin/lockouts.
type lockout struct {
	Subject   string    `json:"subject"`
	ID        string    `json:"id"`
	Kind      string    `json:"kind"`
	Rule      string    `json:"rule"`
	ExpiresAt time.Time `json:"expires_at"`
	SetAt     time.Time `json:"set_at"`
}

// multiplier is an entry of GET /v1/admin/multipliers.
type multiplier struct {
	Subject   string     `json:"subject"`
	ID        string     `json:"id"`
	Source    string     `json:"source"`
	Value     float64    `json:"value"`
	ExpiresAt *time.Time `json:"expires_at"`
	Reason    string     `json:"reason"`
	SetAt     time.Time  `json:"set_at"`
}

// offender is an entry of GET /v1/admin/offenders.
type offender struct {
	Limit string    `json:"limit"`
	Key   string    `json:"key"`
	Count int64     `json:"count"`
	Since time.Time `json:"since"`
}

// auditEvent is an entry of GET /v1/admin/audit.
type auditEvent struct {
	TS         time.Time  `json:"ts"`
	Action     string     `json:"action"`
	Subject    string     `json:"subject"`
	ID         string     `json:"id"`
	Value      *float64   `json:"value"`
	DeviceID   string     `json:"device_id"` // trust_revoke's device ("" all)
	TTL        string     `json:"ttl"`
	ExpiresAt  *time.Time `json:"expires_at"`
	Reason     string     `json:"reason"`
	RequestID  string     `json:"request_id"`
	RemoteAddr string     `json:"remote_addr"`
	ClientIP   string     `json:"client_ip"`
	Cleared    *bool      `json:"cleared"`
}

// alert is an entry of GET /v1/admin/alerts.
type alert struct {
	TS         time.Time `json:"ts"`
	Kind       string    `json:"kind"`
	Subject    string    `json:"subject"`
	ID         string    `json:"id"`
	Rule       string    `json:"rule"`
	Multiplier float64   `json:"multiplier"`
	ExpiresAt  time.Time `json:"expires_at"`
	Reason     string    `json:"reason"`
	Count      int       `json:"count"`
	Shadow     bool      `json:"shadow"`
}

// subjectView is GET /v1/admin/subjects/{subject}/{id}.
type subjectView struct {
	Subject     string   `json:"subject"`
	ID          string   `json:"id"`
	Effective   float64  `json:"effective"`
	WithToken   *float64 `json:"effective_with_device_token"`
	Multipliers []struct {
		Source    string     `json:"source"`
		Value     float64    `json:"value"`
		ExpiresAt *time.Time `json:"expires_at"`
		Reason    string     `json:"reason"`
	} `json:"multipliers"`
	Lockout     *lockView      `json:"lockout"`
	Lockouts    []lockView     `json:"lockouts"` // every lock in force, longest first
	Attestation map[string]any `json:"attestation"`
	Warning     string         `json:"warning"` // no limit is keyed by the subject's kind
	// TrustedDevices are an account's trusted devices, the latest ending first.
	TrustedDevices []struct {
		DeviceID  string    `json:"device_id"`
		ExpiresAt time.Time `json:"expires_at"`
	} `json:"trusted_devices"`
}

// lockView is a lock of the subject view.
type lockView struct {
	Kind      string    `json:"kind"`
	Rule      string    `json:"rule"`
	ExpiresAt time.Time `json:"expires_at"`
}

// subjectKinds are the subject kinds, in the order forms offer them;
// attrKind stands for attr:NAME, the name given in the form's attr field
// (7.4: velocity rules and admin multipliers on an attribute's value).
var subjectKinds = []string{"account", "ip", "user", "device", "asn", attrKind}

// attrKind is the form value of an attribute subject: its name is in the
// "attr" field.
const attrKind = "attr:"

// formSubject returns the subject a form names: a kind of subjectKinds
// but attrKind, or attr:NAME (given whole, as the hidden fields of a
// subject's page do, or as attrKind with NAME in attr), and "" for
// anything else.
func formSubject(kind, attr string) string {
	if name, ok := strings.CutPrefix(kind, attrKind); ok {
		if name == "" {
			name = strings.TrimSpace(attr)
		}
		if policy.ValidAttrName(name) {
			return attrKind + name
		}
		return ""
	}
	if slices.Contains(subjectKinds, kind) || kind == bucket.ClaimKind {
		return kind // a claim (a device id sent without its token) is named by the lockouts page's rows
	}
	return ""
}

// errSubject is a form's answer to a subject it cannot name.
var errSubject = errors.New("choose a subject kind and an id (for attr:, the attribute's name: 1-" + strconv.Itoa(policy.MaxAttrName) + " of a-z 0-9 _)")

// formID returns a form's id of subject as the console sends it on: the
// spaces around it dropped only for an account (the API normalises them
// away), an ip or an asn (parsed); other ids exactly as given, since a
// device, user or attribute id may end in a space of some script, and
// "alice-phone\u00a0" trimmed is another subject (an operator's block or
// forget of the attacker's device fell on alice's phone:
// TestAttackConsoleTrimmedDeviceIDBlocksAnother).
func formID(subject, id string) string {
	switch subject {
	case "account", "ip", "asn":
		return strings.TrimSpace(id)
	}
	return id
}

// postedSubject reads a posted form's subject (formSubject) and id.
func postedSubject(r *http.Request) (subject, id string, err error) {
	subject = formSubject(r.PostFormValue("subject"), r.PostFormValue("attr"))
	id = formID(subject, r.PostFormValue("id"))
	if subject == "" || id == "" {
		return "", "", errSubject
	}
	return subject, id, nil
}

// listLimit is how many entries the list pages ask for.
const listLimit = 200

// overview is the overview page's data.
type overview struct {
	Counts      *Summary
	CountsError string
	Lockouts    string // how many are in force: "200+" past listLimit
	Multipliers string
	Alerts      []alert
	Max         int64 // the largest per-minute total, for the chart's scale
}

func (c *Console) handleOverview(w http.ResponseWriter, r *http.Request, v *view) {
	v.Title, v.Refresh = "Overview", 15
	ov := overview{}
	if c.o.Counters != nil {
		if s, err := c.o.Counters.Summary(c.o.Now()); err != nil {
			ov.CountsError = err.Error()
		} else {
			ov.Counts = &s
			for _, m := range s.Minutes {
				ov.Max = max(ov.Max, m.Allowed+m.Denied)
			}
		}
	}
	var locks []lockout
	var ms []multiplier
	var errs []string
	// one more than listLimit: past it the tiles say "200+", not 200
	if err := c.call(r, "GET", "/v1/admin/lockouts?limit="+itoa(listLimit+1), nil, &locks); err != nil {
		errs = append(errs, "lockouts: "+err.Error())
	}
	if err := c.call(r, "GET", "/v1/admin/multipliers?limit="+itoa(listLimit+1), nil, &ms); err != nil {
		errs = append(errs, "multipliers: "+err.Error())
	}
	if err := c.call(r, "GET", "/v1/admin/alerts?limit=5", nil, &ov.Alerts); err != nil {
		errs = append(errs, "alerts: "+err.Error())
	}
	ov.Lockouts, ov.Multipliers = inForce(len(locks)), inForce(len(ms))
	v.Error, v.Data = strings.Join(errs, "; "), ov
	c.render(w, r, http.StatusOK, "overview", *v)
}

// bounded returns list cut to listLimit entries, and whether it was
// longer (it was asked for listLimit+1): a list page says when it shows
// only the newest.
func bounded[T any](list []T) ([]T, bool) {
	if len(list) > listLimit {
		return list[:listLimit], true
	}
	return list, false
}

// inForce is how many of a list are in force, from the n entries asked
// for with limit listLimit+1: "200+" when there are more than listLimit.
func inForce(n int) string {
	if n > listLimit {
		return itoa(listLimit) + "+"
	}
	return itoa(int64(n))
}

func (c *Console) handleLockouts(w http.ResponseWriter, r *http.Request, v *view) {
	v.Title, v.Refresh = "Lockouts", 30
	var locks []lockout
	if err := c.call(r, "GET", "/v1/admin/lockouts?limit="+itoa(listLimit+1), nil, &locks); err != nil {
		v.Error = err.Error()
	}
	locks, v.More = bounded(locks)
	v.Data = locks
	c.render(w, r, http.StatusOK, "lockouts", *v)
}

// handleLift lifts a lockout or step-up of any subject kind through the
// admin API (the account path of 2.x for accounts).
func (c *Console) handleLift(r *http.Request, _ string) (string, error) {
	subject, id, err := postedSubject(r)
	if err != nil {
		return "", err
	}
	path := "/v1/admin/lockouts" + subjectPath(subject, id)
	if subject == "account" {
		path = "/v1/admin/lockouts/" + pathSegment(id)
	}
	var out struct {
		Cleared bool `json:"cleared"`
	}
	if err := c.call(r, "DELETE", path, nil, &out); err != nil {
		return "", err
	}
	if !out.Cleared {
		return "Nothing was in force for " + subject + " " + id + " (recorded anyway).", nil
	}
	return "Lifted the lockout of " + subject + " " + id + ".", nil
}

// handleForgetAttestation frees a device id through the admin API
// (DELETE /v1/admin/attestations/{device_id}): the way back for an owner
// who lost both the App Attest key and the last device token.
func (c *Console) handleForgetAttestation(r *http.Request, _ string) (string, error) {
	id := formID("device", r.PostFormValue("id"))
	if id == "" {
		return "", errors.New("a device id is needed")
	}
	var out struct {
		Cleared bool `json:"cleared"`
	}
	if err := c.call(r, "DELETE", "/v1/admin/attestations/"+pathSegment(id), nil, &out); err != nil {
		return "", err
	}
	if !out.Cleared {
		return "No attestation was kept for device " + id + " (recorded anyway).", nil
	}
	return "Forgot the attestation of device " + id + ": any genuine device may attest it now.", nil
}

// handleRevokeTrust takes a device (or, without one, every device) out
// of an account's trusted devices through the admin API (DELETE
// /v1/admin/trusted-devices/{account}[/{device_id}]): the answer to a
// stolen phone or a compromised account.
func (c *Console) handleRevokeTrust(r *http.Request, _ string) (string, error) {
	account := strings.TrimSpace(r.PostFormValue("account"))
	// exactly as the list shows it: a device id may end in a space of
	// some script, and "alice-phone\u00a0" trimmed is another device
	device := r.PostFormValue("device")
	if account == "" {
		return "", errors.New("an account is needed")
	}
	path := "/v1/admin/trusted-devices/" + pathSegment(account)
	if device != "" {
		path += "/" + pathSegment(device)
	}
	var out struct {
		Cleared bool `json:"cleared"`
	}
	if err := c.call(r, "DELETE", path, nil, &out); err != nil {
		return "", err
	}
	switch {
	case !out.Cleared && device != "":
		return "Device " + device + " was not a trusted device of " + account + " (recorded anyway).", nil
	case !out.Cleared:
		return account + " had no trusted devices (recorded anyway).", nil
	case device != "":
		return "Device " + device + " is no longer a trusted device of " + account + ".", nil
	}
	return account + " has no trusted devices any more.", nil
}

func (c *Console) handleMultipliers(w http.ResponseWriter, r *http.Request, v *view) {
	v.Title, v.Refresh = "Multipliers", 30
	var ms []multiplier
	if err := c.call(r, "GET", "/v1/admin/multipliers?limit="+itoa(listLimit+1), nil, &ms); err != nil {
		v.Error = err.Error()
	}
	ms, v.More = bounded(ms)
	v.Data = ms
	c.render(w, r, http.StatusOK, "multipliers", *v)
}

// handleSetMultiplier sets an admin multiplier through the admin API.
func (c *Console) handleSetMultiplier(r *http.Request, _ string) (string, error) {
	subject, id, err := postedSubject(r)
	if err != nil {
		return "", err
	}
	text := strings.TrimSpace(r.PostFormValue("multiplier"))
	m, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return "", errors.New("the multiplier must be a number such as 0.1 (0 blocks the subject)")
	}
	if policy.Underflows(text, m) { // ParseFloat reads 1e-999 as 0, which blocks
		return "", errors.New("the multiplier " + text + " is too small: it would read as 0, which blocks the subject (write 0 to block)")
	}
	body := map[string]any{"multiplier": m, "reason": r.PostFormValue("reason")}
	if ttl := strings.TrimSpace(r.PostFormValue("ttl")); ttl != "" {
		body["ttl"] = ttl
	}
	var sv subjectView
	if err := c.call(r, "PUT", "/v1/admin/multipliers"+subjectPath(subject, id), body, &sv); err != nil {
		return "", err
	}
	msg := "Set multiplier " + strconv.FormatFloat(m, 'g', -1, 64) + " on " + subject + " " + id + "."
	if sv.Warning != "" {
		return "", errors.New(msg + " But " + sv.Warning + ".")
	}
	return msg, nil
}

// handleClearMultiplier clears an admin multiplier through the admin API.
func (c *Console) handleClearMultiplier(r *http.Request, _ string) (string, error) {
	subject, id, err := postedSubject(r)
	if err != nil {
		return "", err
	}
	if err := c.call(r, "DELETE", "/v1/admin/multipliers"+subjectPath(subject, id), nil, nil); err != nil {
		return "", err
	}
	return "Cleared the admin multiplier of " + subject + " " + id + ".", nil
}

func (c *Console) handleOffenders(w http.ResponseWriter, r *http.Request, v *view) {
	v.Title, v.Refresh = "Offenders", 15
	var out struct {
		Offenders []offender `json:"offenders"`
	}
	if err := c.call(r, "GET", "/v1/admin/offenders", nil, &out); err != nil {
		v.Error = err.Error()
	}
	v.Data = out.Offenders
	c.render(w, r, http.StatusOK, "offenders", *v)
}

// subjectPage is the subject search's data.
type subjectPage struct {
	Kinds []string
	// Subject is the kind chosen (attrKind for an attribute, whose name
	// is Attr); Attr is "" for the other kinds.
	Subject, Attr string
	ID            string
	View          *subjectView
}

func (c *Console) handleSubjects(w http.ResponseWriter, r *http.Request, v *view) {
	v.Title = "Subjects"
	q := r.URL.Query()
	subject := formSubject(q.Get("subject"), q.Get("attr"))
	p := subjectPage{Kinds: subjectKinds, Subject: "account", ID: formID(subject, q.Get("id"))}
	if name, ok := strings.CutPrefix(subject, attrKind); ok {
		p.Subject, p.Attr = attrKind, name
	} else if subject != "" {
		p.Subject = subject
	}
	switch {
	case p.ID != "" && subject == "":
		v.Error = errSubject.Error()
	case p.ID != "":
		var sv subjectView
		if err := c.call(r, "GET", "/v1/admin/subjects"+subjectPath(subject, p.ID), nil, &sv); err != nil {
			v.Error = err.Error()
		} else {
			p.View = &sv
			v.Title = sv.Subject + " " + sv.ID
		}
	}
	v.Data = p
	c.render(w, r, http.StatusOK, "subjects", *v)
}

func (c *Console) handleAudit(w http.ResponseWriter, r *http.Request, v *view) {
	v.Title, v.Refresh = "Audit trail", 30
	var list []auditEvent
	if err := c.call(r, "GET", "/v1/admin/audit?limit="+itoa(listLimit+1), nil, &list); err != nil {
		v.Error = err.Error()
	}
	list, v.More = bounded(list)
	v.Data = list
	c.render(w, r, http.StatusOK, "audit", *v)
}

func (c *Console) handleAlerts(w http.ResponseWriter, r *http.Request, v *view) {
	v.Title, v.Refresh = "Alerts", 30
	var list []alert
	if err := c.call(r, "GET", "/v1/admin/alerts?limit="+itoa(listLimit+1), nil, &list); err != nil {
		v.Error = err.Error()
	}
	list, v.More = bounded(list)
	v.Data = list
	c.render(w, r, http.StatusOK, "alerts", *v)
}
