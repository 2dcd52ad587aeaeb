package policy

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Alert kinds an `alerting` section may name in a webhook's `kinds`
// (contract 4.x, 7.2 and 7.4).
var AlertKinds = []string{"anomaly", "lockout", "step_up", "tighten", "block", "repeat_offender"}

// Webhook formats.
const (
	// FormatJSON posts the alert's JSON (the default).
	FormatJSON = "json"
	// FormatSlack posts {"text": "..."} (a Slack incoming webhook).
	FormatSlack = "slack"
)

// Defaults of the `alerting` section.
const (
	// DefaultAlertRetryFor is `alerting.retry_for` when unset.
	DefaultAlertRetryFor = 24 * time.Hour
	maxWebhooks          = 32
	maxAlertLabels       = 32
	maxURL               = 2048
)

var (
	alertingFields     = []string{"alertmanager", "webhooks", "fold", "retry_for", "shadow"}
	alertmanagerFields = []string{"url", "labels"}
	webhookFields      = []string{"url", "secret_env", "format", "kinds"}
	webhookFormats     = []string{FormatJSON, FormatSlack}
	// reservedAlertLabels are the labels every Alertmanager alert carries.
	reservedAlertLabels = []string{"alertname", "kind", "subject", "id", "rule", "severity"}
)

// Alerting is the `alerting` section (contract 7.2): where riskd (and the
// one-process limiter) deliver alerts. nil in Policy means no delivery.
type Alerting struct {
	// Alertmanager is the Alertmanager sink (nil: none).
	Alertmanager *AlertmanagerSink
	// Webhooks are the webhook sinks, in file order.
	Webhooks []Webhook
	// Fold is the window within which repeats of one (kind, subject, id)
	// become one delivery (0: every alert is delivered on its own).
	Fold time.Duration
	// RetryFor is how long a delivery is retried before it is given up
	// (default DefaultAlertRetryFor).
	RetryFor time.Duration
	// Shadow delivers the alerts of shadow rules too (default false).
	Shadow bool
	// Line is the section's line in the policy file.
	Line int
}

// AlertmanagerSink is `alerting.alertmanager`.
type AlertmanagerSink struct {
	// URL is Alertmanager's base URL (alerts go to URL + /api/v2/alerts).
	URL string
	// Labels are added to every alert's labels.
	Labels map[string]string
	// Line is the sink's line in the policy file.
	Line int
}

// Webhook is one entry of `alerting.webhooks`.
type Webhook struct {
	// URL receives a POST per delivery.
	URL string
	// SecretEnv names the environment variable holding the signing secret
	// ("" sends unsigned); SecretEnvLine is its line.
	SecretEnv     string
	SecretEnvLine int
	// Format is FormatJSON or FormatSlack.
	Format string
	// Kinds are the alert kinds delivered (empty: every kind).
	Kinds []string
	// Line is the entry's line in the policy file.
	Line int
}

// Wants reports whether the webhook delivers alerts of kind.
func (w *Webhook) Wants(kind string) bool {
	return len(w.Kinds) == 0 || contains(w.Kinds, kind)
}

// alerting parses the `alerting` section.
func (ps *parser) alerting(f field) *Alerting {
	m := ps.mapping(f.val, f.name, alertingFields)
	if m == nil {
		return nil
	}
	a := &Alerting{RetryFor: DefaultAlertRetryFor, Line: f.key.Line}
	for _, g := range m.fields {
		switch g.name {
		case "alertmanager":
			a.Alertmanager = ps.alertmanager(g)
		case "webhooks":
			a.Webhooks = ps.webhooks(g)
		case "fold":
			if d, ok := ps.duration(g); ok {
				a.Fold = d
			}
		case "retry_for":
			if d, ok := ps.duration(g); ok {
				a.RetryFor = d
			}
		case "shadow":
			if b, ok := ps.boolean(g); ok {
				a.Shadow = b
			}
		}
	}
	if _, am := m.get("alertmanager"); !am {
		if _, wh := m.get("webhooks"); !wh {
			ps.errorf(m.node, "alerting: want alertmanager or webhooks (or both)")
		}
	}
	return a
}

// alertmanager parses `alerting.alertmanager`.
func (ps *parser) alertmanager(f field) *AlertmanagerSink {
	m := ps.mapping(f.val, "alertmanager", alertmanagerFields)
	if m == nil {
		return nil
	}
	s := &AlertmanagerSink{Line: f.key.Line, Labels: map[string]string{}}
	if !ps.require(m, "alertmanager", "url") {
		return s
	}
	g, _ := m.get("url")
	s.URL, _ = ps.sinkURL(g)
	if g, ok := m.get("labels"); ok && !isNull(g.val) {
		ps.alertLabels(g, s.Labels)
	}
	return s
}

// alertLabels parses `alertmanager.labels` into out.
func (ps *parser) alertLabels(f field, out map[string]string) {
	lm := ps.mapping(f.val, "alertmanager labels", nil)
	if lm == nil {
		return
	}
	if len(lm.fields) > maxAlertLabels {
		ps.errorf(f.val, "alertmanager labels: %d labels, at most %d", len(lm.fields), maxAlertLabels)
		return
	}
	for _, h := range lm.fields {
		if !validLabelName(h.name) {
			ps.errorf(h.key, "alertmanager labels: %q is not a label name (want [a-zA-Z_][a-zA-Z0-9_]*)", h.name)
			continue
		}
		if contains(reservedAlertLabels, h.name) {
			ps.errorf(h.key, "alertmanager labels: %q is set by Tollgate (%s are)", h.name, orList(reservedAlertLabels))
			continue
		}
		if v, ok := ps.str(h); ok {
			out[h.name] = v
		}
	}
}

// webhooks parses `alerting.webhooks`.
func (ps *parser) webhooks(f field) []Webhook {
	l, ok := ps.nonEmptyList(f)
	if !ok {
		return nil
	}
	if len(l) > maxWebhooks {
		ps.errorf(f.val, "webhooks: %d entries, at most %d", len(l), maxWebhooks)
		return nil
	}
	var out []Webhook
	for _, n := range l {
		if w, ok := ps.webhook(n); ok {
			out = append(out, w)
		}
	}
	return out
}

// webhook parses one entry of `alerting.webhooks`.
func (ps *parser) webhook(n *yaml.Node) (Webhook, bool) {
	w := Webhook{Format: FormatJSON, Line: n.Line}
	m := ps.mapping(n, "webhooks entry", webhookFields)
	if m == nil || !ps.require(m, "webhook", "url") {
		return w, false
	}
	ok := true
	for _, g := range m.fields {
		var good bool
		switch g.name {
		case "url":
			w.URL, good = ps.sinkURL(g)
		case "secret_env":
			w.SecretEnv, good = ps.envName(g)
			w.SecretEnvLine = g.val.Line
		case "format":
			w.Format, good = ps.oneOf(g, webhookFormats...)
		case "kinds":
			w.Kinds, good = ps.alertKinds(g)
		}
		ok = ok && good
	}
	return w, ok
}

// alertKinds parses a webhook's `kinds`.
func (ps *parser) alertKinds(f field) ([]string, bool) {
	l, ok := ps.nonEmptyList(f)
	if !ok {
		return nil, false
	}
	var kinds []string
	for _, n := range l {
		s, ok := ps.scalar(n, "kinds")
		if !ok {
			return nil, false
		}
		if !contains(AlertKinds, s) {
			ps.errorf(n, "kinds: %q is not an alert kind (want %s)", s, orList(AlertKinds))
			return nil, false
		}
		if !contains(kinds, s) {
			kinds = append(kinds, s)
		}
	}
	return kinds, true
}

// sinkURL returns f's value when it is an absolute http(s) URL with a
// host and no fragment.
func (ps *parser) sinkURL(f field) (string, bool) {
	s, ok := ps.str(f)
	if !ok {
		return "", false
	}
	if err := checkSinkURL(s); err != nil {
		ps.errorf(f.val, "%s %q: %v", f.name, redactURL(s), err)
		return "", false
	}
	return s, true
}

// checkSinkURL says what is wrong with s as a sink's URL.
func checkSinkURL(s string) error {
	if len(s) > maxURL {
		return fmt.Errorf("longer than %d bytes", maxURL)
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return errors.New("not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("want an http:// or https:// URL")
	case u.Host == "" || u.Hostname() == "":
		return errors.New("want a URL with a host")
	case u.Fragment != "" || strings.Contains(s, "#"):
		return errors.New("must not have a #fragment")
	}
	return nil
}

// redactURL is s as messages show it: its scheme and host, the rest cut
// to "/…" (a Slack or Discord webhook's path is its secret, a token may
// sit in the query, and these messages are logged and printed by
// limiter validate), and user info as xxx (a password in it is a
// secret).
func redactURL(s string) string {
	rest := 0
	if i := strings.Index(s, "://"); i >= 0 {
		rest = i + 3
	}
	if j := strings.IndexAny(s[rest:], "/?#"); j >= 0 && rest+j+1 < len(s) {
		s = s[:rest+j] + "/…"
	}
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	u.User = url.User("xxx")
	return strings.Replace(u.String(), "/%E2%80%A6", "/…", 1)
}

// validLabelName reports whether s is a Prometheus label name.
func validLabelName(s string) bool {
	if s == "" || strings.HasPrefix(s, "__") {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// CheckEnv checks the environment variables the section names: each
// webhook's secret_env must be set and non-empty (getenv reads them). Its
// errors are *Error, "FILE:LINE: ...", with file the policy's name.
func (a *Alerting) CheckEnv(file string, getenv func(string) string) error {
	if a == nil {
		return nil
	}
	var errs []*Error
	for i, w := range a.Webhooks {
		if w.SecretEnv != "" && getenv(w.SecretEnv) == "" {
			errs = append(errs, &Error{File: file, Line: w.SecretEnvLine,
				Msg: fmt.Sprintf("alerting.webhooks[%d].secret_env: environment variable %s is not set or empty (it holds the webhook's signing secret)", i, w.SecretEnv)})
		}
	}
	return joinErrors(errs, 0)
}
