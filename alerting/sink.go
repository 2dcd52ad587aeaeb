package alerting

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/visible"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// SignatureHeader is the header of a signed webhook delivery:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>".
const SignatureHeader = "X-Tollgate-Signature"

// Delivery is what a sink is handed: one alert, standing for Folded
// alerts of one (kind, subject, id) when folding joined repeats.
type Delivery struct {
	// ID is the delivery's id (the first folded alert's alert_id): the
	// same on every retry and redelivery, so receivers dedupe on it.
	ID string
	// Alert is the most recent alert of the delivery.
	Alert streams.Alert
	// Folded is how many alerts the delivery stands for (1: not folded).
	Folded int
}

// WebhookBody is the JSON body of a webhook delivery (format json): the
// alert's fields of contract 4.x plus delivery_id, and folded when the
// delivery stands for more than one alert.
type WebhookBody struct {
	streams.Alert
	DeliveryID string `json:"delivery_id"`
	Folded     int    `json:"folded,omitempty"`
}

// sink is one destination of deliveries.
type sink interface {
	// name is the sink's metrics label: "alertmanager" or "webhooks[N]".
	name() string
	// send makes one attempt; a nil error means the sink took it.
	send(ctx context.Context, c *http.Client, d Delivery, now time.Time) error
}

// maxAnswer bounds how much of an answer is read (and quoted in errors).
const maxAnswer = 64 << 10

// post sends body to url and succeeds on a 2xx answer.
func post(ctx context.Context, c *http.Client, url string, body []byte, header http.Header) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("alerting: build request: %w", err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "tollgate-alerting")
	resp, err := c.Do(req)
	if err != nil {
		// The url's path and query may be its secret (a Slack webhook's
		// is), and this error is logged: name only the scheme and host.
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("alerting: post to %s://%s: %w", req.URL.Scheme, req.URL.Host, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("alerting: answered %s: %.200s", resp.Status, strings.TrimSpace(string(answer)))
	}
	return nil
}

// alertmanagerSink posts to Alertmanager's API v2.
type alertmanagerSink struct {
	url    string // .../api/v2/alerts
	labels map[string]string
}

// amAlert is one alert of Alertmanager's API v2 (postableAlert).
type amAlert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       *time.Time        `json:"endsAt,omitempty"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
}

func newAlertmanager(s *policy.AlertmanagerSink) *alertmanagerSink {
	return &alertmanagerSink{url: strings.TrimRight(s.URL, "/") + "/api/v2/alerts", labels: s.Labels}
}

func (s *alertmanagerSink) name() string { return "alertmanager" }

func (s *alertmanagerSink) send(ctx context.Context, c *http.Client, d Delivery, _ time.Time) error {
	body, err := json.Marshal([]amAlert{amAlertOf(d, s.labels)})
	if err != nil {
		return fmt.Errorf("alerting: encode alertmanager alert: %w", err)
	}
	return post(ctx, c, s.url, body, nil)
}

// amAlertOf is the Alertmanager alert of d (contract 7.2): labels
// alertname (Tollgate + the kind in CamelCase), kind, subject, id, rule,
// severity and the section's labels; annotations summary and description
// (and folded); startsAt the alert's ts, endsAt its expires_at when set.
func amAlertOf(d Delivery, extra map[string]string) amAlert {
	a := d.Alert
	labels := make(map[string]string, len(extra)+6)
	for k, v := range extra {
		labels[k] = v
	}
	labels["alertname"] = AlertName(a.Kind)
	labels["kind"] = a.Kind
	labels["subject"] = a.Subject
	labels["id"] = a.SubjectID
	labels["rule"] = a.Rule
	labels["severity"] = Severity(a.Kind)
	ann := map[string]string{"summary": summary(a), "description": description(a)}
	if d.Folded > 1 {
		ann["folded"] = strconv.Itoa(d.Folded)
	}
	out := amAlert{Labels: labels, Annotations: ann, StartsAt: a.TS}
	if !a.ExpiresAt.IsZero() {
		end := a.ExpiresAt
		out.EndsAt = &end
	}
	return out
}

// AlertName is the alertname of an alert of kind: "Tollgate" and the
// kind in CamelCase (TollgateLockout, TollgateRepeatOffender).
func AlertName(kind string) string {
	var b strings.Builder
	b.WriteString("Tollgate")
	for _, part := range strings.Split(kind, "_") {
		if part == "" {
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]))
		b.WriteString(part[1:])
	}
	return b.String()
}

// Severity is "critical" for lockouts and blocks, "warning" otherwise.
func Severity(kind string) string {
	if kind == streams.AlertLockout || kind == "block" {
		return "critical"
	}
	return "warning"
}

// summary is the alert's reason, or a sentence when it has none, with
// its Unicode format characters shown as [U+XXXX] (the id label keeps the
// id exact, for routes and silences).
func summary(a streams.Alert) string {
	if a.Reason != "" {
		return visible.Format(a.Reason)
	}
	return fmt.Sprintf("%s of %s %s", a.Kind, a.Subject, visible.Format(a.SubjectID))
}

// description says what fired, on whom, and until when.
func description(a streams.Alert) string { return describe(a, strconv.Quote(a.SubjectID)) }

// describe is description with the subject's id written as id.
func describe(a streams.Alert, id string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Tollgate %s of %s %s by rule %s", strings.ReplaceAll(a.Kind, "_", " "), a.Subject, id, a.Rule)
	if a.Count > 0 {
		fmt.Fprintf(&b, " after %d events", a.Count)
	}
	if a.Rate > 0 {
		fmt.Fprintf(&b, " (%.3g/s, baseline %.3g/s)", a.Rate, a.Baseline)
	}
	if a.Multiplier != 1 {
		fmt.Fprintf(&b, ", multiplier %g", a.Multiplier)
	}
	if !a.ExpiresAt.IsZero() {
		fmt.Fprintf(&b, ", until %s", a.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if a.Shadow {
		b.WriteString(" (shadow rule: nothing enforced)")
	}
	b.WriteString(".")
	return b.String()
}

// webhookSink posts the alert's JSON (or Slack's {"text": ...}).
type webhookSink struct {
	label  string
	url    string
	secret []byte // nil: unsigned
	slack  bool
	broken error // non-nil: every attempt fails with it
}

func (s *webhookSink) name() string { return s.label }

func (s *webhookSink) send(ctx context.Context, c *http.Client, d Delivery, now time.Time) error {
	if s.broken != nil {
		return s.broken
	}
	var v any = WebhookBody{Alert: d.Alert, DeliveryID: d.ID, Folded: folded(d)}
	if s.slack {
		v = map[string]string{"text": SlackText(d)}
	}
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("alerting: encode webhook body: %w", err)
	}
	var h http.Header
	if s.secret != nil {
		h = http.Header{SignatureHeader: {Sign(s.secret, now, body)}}
	}
	return post(ctx, c, s.url, body, h)
}

// folded is d.Folded when the delivery is folded, else 0 (omitted).
func folded(d Delivery) int {
	if d.Folded > 1 {
		return d.Folded
	}
	return 0
}

// Sign returns the X-Tollgate-Signature value of body signed at now:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>".
func Sign(secret []byte, now time.Time, body []byte) string {
	t := strconv.FormatInt(now.Unix(), 10)
	return "t=" + t + ",v1=" + hex.EncodeToString(signature(secret, t, body))
}

// signature is HMAC-SHA256(secret, "<t>.<body>").
func signature(secret []byte, t string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(t))
	m.Write([]byte("."))
	m.Write(body)
	return m.Sum(nil)
}

// Verify is a receiver's check of an X-Tollgate-Signature value (Sign's,
// docs/alerting.md): the signature of body compared in constant time,
// and its t within tolerance of now (a replayed delivery is refused). It
// returns when the delivery was signed. An empty secret (a receiver whose
// secret variable is unset) verifies nothing: HMAC takes an empty key,
// and anyone can sign with it.
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) (time.Time, error) {
	if len(secret) == 0 {
		return time.Time{}, errors.New("alerting: no secret to verify the signature with (is its variable set?)")
	}
	var ts, v1 string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			v1 = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("alerting: signature header %q has no t", header)
	}
	at := time.Unix(sec, 0)
	if d := now.Sub(at); d > tolerance || d < -tolerance {
		return at, fmt.Errorf("alerting: signature made %v from now, beyond %v", d, tolerance)
	}
	got, err := hex.DecodeString(v1)
	if err != nil || !hmac.Equal(got, signature(secret, ts, body)) {
		return at, errors.New("alerting: signature does not match")
	}
	return at, nil
}

// SlackText is the text of a Slack delivery, in Slack's mrkdwn. The
// subject id and the reason come from clients (an account name is
// whatever the attacker typed), so every piece is escaped as Slack asks
// (& < > as &amp; &lt; &gt;): no id can mention a channel (<!channel>)
// or post a link (<https://...|text>). The id shows only in code spans,
// whose backticks it cannot close: Slack makes a link of a bare URL or
// domain anywhere else ("https://evil.example/reset" as an account name).
func SlackText(d Delivery) string {
	a := d.Alert
	icon := ":warning:"
	if Severity(a.Kind) == "critical" {
		icon = ":rotating_light:"
	}
	id := slackCode(a.SubjectID)
	sum := slackCode(a.Reason) // a repeat offender's names the key, client ids in it
	if a.Reason == "" {
		sum = fmt.Sprintf("%s of %s %s", SlackEscape(a.Kind), SlackEscape(a.Subject), id)
	}
	const mark = "\x00" // where the id goes: no other part holds a NUL
	desc := strings.Replace(SlackEscape(describe(a, mark)), mark, id, 1)
	text := fmt.Sprintf("%s *%s* %s %s: %s\n%s", icon, AlertName(a.Kind), SlackEscape(a.Subject), id, sum, desc)
	if d.Folded > 1 {
		text += fmt.Sprintf("\n(%d alerts folded into this one)", d.Folded)
	}
	return text
}

// slackCode is s as a Slack code span: escaped, its backticks shown as
// ' so that it cannot close the span, its Unicode format characters as
// [U+XXXX] (a right-to-left override would show another name).
func slackCode(s string) string {
	return "`" + SlackEscape(strings.ReplaceAll(visible.Format(s), "`", "'")) + "`"
}

// slackEscaper escapes the three characters Slack's mrkdwn gives meaning.
var slackEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// SlackEscape returns s with &, < and > escaped as Slack's message
// formatting requires, so s shows as written and links, mentions and
// commands in it stay text.
func SlackEscape(s string) string { return slackEscaper.Replace(s) }

// sinkKey is a sink's identity, which names its durable consumer: what
// it is, where it posts and in what format. Its place in the policy's
// list, its kinds and its secret are not part of it, so reordering the
// webhooks, narrowing their kinds or rotating a secret keeps each
// sink's consumer, and its position in the stream.
type sinkKey struct {
	kind   string // "am" (Alertmanager) or "wh" (a webhook)
	url    string
	format string // "json" or "slack" ("" for Alertmanager)
	n      int    // 0, or how many sinks of the same identity come before it
}

// consumerName is the name of k's durable consumer: durable, the kind and
// 12 hex digits of a SHA-256 of the identity ("riskd-alerts-wh-3f2a...").
// The url itself (a Slack webhook's url is its secret) is not in it.
func consumerName(durable string, k sinkKey) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d", k.kind, k.url, k.format, k.n)
	return durable + "-" + k.kind + "-" + hex.EncodeToString(h.Sum(nil))[:12]
}

// sinkRef is one sink of a policy: its identity and its place in
// a.Webhooks (-1 for Alertmanager).
type sinkRef struct {
	key   sinkKey
	index int
}

// sinkRefs lists the sinks of a (none when a is nil), Alertmanager first.
func sinkRefs(a *policy.Alerting) []sinkRef {
	if a == nil {
		return nil
	}
	var out []sinkRef
	seen := map[sinkKey]int{}
	add := func(k sinkKey, index int) {
		base := k
		k.n = seen[base]
		seen[base]++
		out = append(out, sinkRef{key: k, index: index})
	}
	if a.Alertmanager != nil {
		add(sinkKey{kind: "am", url: a.Alertmanager.URL}, -1)
	}
	for i := range a.Webhooks {
		w := &a.Webhooks[i]
		format := policy.FormatJSON
		if w.Format == policy.FormatSlack {
			format = policy.FormatSlack
		}
		add(sinkKey{kind: "wh", url: w.URL, format: format}, i)
	}
	return out
}

// sinkOf builds the sink of a whose identity is k, when a has it and it
// takes alerts of kind (else nil); getenv reads a webhook's secret. A
// webhook whose secret variable is empty (the policy's checks refuse that
// at start and at reload) fails every attempt rather than deliver
// unsigned.
func sinkOf(a *policy.Alerting, k sinkKey, kind string, getenv func(string) string) sink {
	for _, r := range sinkRefs(a) {
		if r.key != k {
			continue
		}
		if r.index < 0 {
			return newAlertmanager(a.Alertmanager)
		}
		w := &a.Webhooks[r.index]
		if !w.Wants(kind) {
			return nil
		}
		s := &webhookSink{label: fmt.Sprintf("webhooks[%d]", r.index), url: w.URL, slack: w.Format == policy.FormatSlack}
		if w.SecretEnv != "" {
			if secret := getenv(w.SecretEnv); secret != "" {
				s.secret = []byte(secret)
			} else {
				s.broken = fmt.Errorf("alerting: webhooks[%d]: environment variable %s (secret_env) is empty", r.index, w.SecretEnv)
			}
		}
		return s
	}
	return nil
}
