package policy

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// contractAlerting is the `alerting` example of contract 7.2.
const contractAlerting = `alerting:
  alertmanager: {url: "http://127.0.0.1:9093", labels: {team: security}}
  webhooks:
    - {url: "https://hooks.example.com/tollgate", secret_env: TOLLGATE_WEBHOOK_SECRET}
    - {url: "https://hooks.slack.com/services/T000/B000/XXX", format: slack, kinds: [lockout, anomaly]}
  fold: 1m
`

func TestParseAlerting(t *testing.T) {
	t.Parallel()
	p, err := Parse("p.yaml", []byte(head+contractAlerting))
	if err != nil {
		t.Fatal(err)
	}
	want := &Alerting{
		Alertmanager: &AlertmanagerSink{URL: "http://127.0.0.1:9093", Labels: map[string]string{"team": "security"}, Line: 7},
		Webhooks: []Webhook{
			{URL: "https://hooks.example.com/tollgate", SecretEnv: "TOLLGATE_WEBHOOK_SECRET", SecretEnvLine: 9, Format: FormatJSON, Line: 9},
			{URL: "https://hooks.slack.com/services/T000/B000/XXX", Format: FormatSlack, Kinds: []string{"lockout", "anomaly"}, Line: 10},
		},
		Fold: time.Minute, RetryFor: DefaultAlertRetryFor, Line: 6,
	}
	if !reflect.DeepEqual(p.Alerting, want) {
		t.Fatalf("alerting:\n got %+v\nwant %+v", p.Alerting, want)
	}
	if !p.Alerting.Webhooks[0].Wants("tighten") || p.Alerting.Webhooks[1].Wants("tighten") || !p.Alerting.Webhooks[1].Wants("anomaly") {
		t.Error("Wants: a webhook without kinds takes every kind, one with kinds only those")
	}

	p, err = Parse("p.yaml", []byte(head+"alerting:\n  webhooks: [{url: \"http://10.0.0.1:8080/hook\"}]\n  retry_for: 2h\n  shadow: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a := p.Alerting; a.RetryFor != 2*time.Hour || !a.Shadow || a.Alertmanager != nil || a.Fold != 0 {
		t.Errorf("alerting: %+v", a)
	}
	if p, err := Parse("p.yaml", []byte(head+"alerting:\n")); err != nil || p.Alerting != nil {
		t.Errorf("an empty section is no section: %v, %+v", err, p)
	}
	if Default().Alerting != nil {
		t.Error("the example policy delivers alerts nowhere")
	}
}

func TestParseAlertingErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"not a mapping", "alerting: [x]\n", `p.yaml:6: alerting: want a mapping, got a list`},
		{"no sink", "alerting: {fold: 1m}\n", `p.yaml:6: alerting: want alertmanager or webhooks (or both)`},
		{"unknown field", "alerting:\n  alertmanager: {url: \"http://a:9093\"}\n  folds: 1m\n", `p.yaml:8: unknown field "folds" (want one of alertmanager, webhooks, fold, retry_for, shadow)`},
		{"alertmanager without url", "alerting:\n  alertmanager: {labels: {team: x}}\n", `p.yaml:7: alertmanager: missing required field "url"`},
		{"alertmanager bad scheme", "alerting:\n  alertmanager: {url: \"ftp://a:9093\"}\n", `p.yaml:7: url "ftp://a:9093": want an http:// or https:// URL`},
		{"alertmanager no host", "alerting:\n  alertmanager: {url: \"http:///x\"}\n", `p.yaml:7: url "http:///…": want a URL with a host`},
		{"url with fragment", "alerting:\n  alertmanager: {url: \"http://a:9093/#x\"}\n", `p.yaml:7: url "http://a:9093/…": must not have a #fragment`},
		{"url password redacted", "alerting:\n  alertmanager: {url: \"gopher://u:pw@a\"}\n", `p.yaml:7: url "gopher://xxx@a": want an http:// or https:// URL`},
		{"url password and path redacted", "alerting:\n  alertmanager: {url: \"gopher://u:pw@a/x\"}\n", `p.yaml:7: url "gopher://xxx@a/…": want an http:// or https:// URL`},
		{"not a url", "alerting:\n  alertmanager: {url: \"http://a b\"}\n", `p.yaml:7: url "http://a b": not a URL`},
		// a Slack or Discord webhook's path is its secret, and these messages
		// are logged by a refused reload and printed by limiter validate in CI
		{"webhook path not echoed", "alerting:\n  webhooks:\n    - {url: \"hooks.slack.com/services/T000/B000/XXXSECRET\", format: slack}\n", `p.yaml:8: url "hooks.slack.com/…": want an http:// or https:// URL`},
		{"webhook query not echoed", "alerting:\n  webhooks:\n    - {url: \"https://h.example/hook?token=XXXSECRET#x\"}\n", `p.yaml:8: url "https://h.example/…": must not have a #fragment`},
		{"reserved label", "alerting:\n  alertmanager:\n    url: \"http://a:9093\"\n    labels: {severity: page}\n", `p.yaml:9: alertmanager labels: "severity" is set by Tollgate (alertname, kind, subject, id, rule or severity are)`},
		{"bad label name", "alerting:\n  alertmanager:\n    url: \"http://a:9093\"\n    labels: {\"a-b\": x}\n", `p.yaml:9: alertmanager labels: "a-b" is not a label name (want [a-zA-Z_][a-zA-Z0-9_]*)`},
		{"empty label value", "alerting:\n  alertmanager:\n    url: \"http://a:9093\"\n    labels: {team: \"\"}\n", `p.yaml:9: team: must not be empty`},
		{"webhooks empty", "alerting:\n  webhooks: []\n", `p.yaml:7: webhooks: must not be empty`},
		{"webhook without url", "alerting:\n  webhooks:\n    - {format: slack}\n", `p.yaml:8: webhook: missing required field "url"`},
		{"webhook unknown field", "alerting:\n  webhooks:\n    - {url: \"http://h/x\", secret: x}\n", `p.yaml:8: unknown field "secret" (want one of url, secret_env, format, kinds)`},
		{"webhook bad format", "alerting:\n  webhooks:\n    - {url: \"http://h/x\", format: teams}\n", `p.yaml:8: format "teams": want json or slack`},
		{"webhook bad kind", "alerting:\n  webhooks:\n    - url: \"http://h/x\"\n      kinds: [lockout, lockouts]\n", `p.yaml:9: kinds: "lockouts" is not an alert kind (want anomaly, lockout, step_up, tighten, block or repeat_offender)`},
		{"webhook empty kinds", "alerting:\n  webhooks:\n    - {url: \"http://h/x\", kinds: []}\n", `p.yaml:8: kinds: must not be empty`},
		{"webhook bad secret_env", "alerting:\n  webhooks:\n    - url: \"http://h/x\"\n      secret_env: 9LIVES\n", `p.yaml:9: secret_env "9LIVES": not a valid environment variable name`},
		{"webhook empty secret_env", "alerting:\n  webhooks:\n    - url: \"http://h/x\"\n      secret_env: \"\"\n", `p.yaml:9: secret_env: must not be empty`},
		{"bad fold", "alerting:\n  webhooks: [{url: \"http://h/x\"}]\n  fold: 0s\n", `p.yaml:8: fold "0s": must be positive`},
		{"bad retry_for", "alerting:\n  webhooks: [{url: \"http://h/x\"}]\n  retry_for: forever\n", `p.yaml:8: retry_for "forever": want a duration like 30s, 10m or 24h`},
		{"bad shadow", "alerting:\n  webhooks: [{url: \"http://h/x\"}]\n  shadow: yes please\n", `p.yaml:8: shadow: want true or false, got "yes please"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("p.yaml", []byte(head+tt.yaml))
			if err == nil || err.Error() != tt.want {
				t.Fatalf("got  %v\nwant %s", err, tt.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
		})
	}
}

func TestAlertingCheckEnv(t *testing.T) {
	t.Parallel()
	p, err := Parse("p.yaml", []byte(head+contractAlerting))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	want := `p.yaml:9: alerting.webhooks[0].secret_env: environment variable TOLLGATE_WEBHOOK_SECRET is not set or empty (it holds the webhook's signing secret)`
	if err := p.Alerting.CheckEnv("p.yaml", getenv); err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
	env["TOLLGATE_WEBHOOK_SECRET"] = "s3cret"
	if err := p.Alerting.CheckEnv("p.yaml", getenv); err != nil {
		t.Fatal(err)
	}
	if err := (*Alerting)(nil).CheckEnv("p.yaml", getenv); err != nil {
		t.Fatal(err)
	}
}

// TestHolderCheckRefusesReload: a reload whose Check fails (an unset
// secret_env) is refused and the running policy stays in force.
func TestHolderCheckRefusesReload(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte(head), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHolder(path, p, nil)
	h.Check = func(p *Policy) error { return p.Alerting.CheckEnv(path, func(string) string { return "" }) }
	if err := os.WriteFile(path, []byte(head+contractAlerting), 0o600); err != nil {
		t.Fatal(err)
	}
	err = h.Reload()
	want := path + `:9: alerting.webhooks[0].secret_env: environment variable TOLLGATE_WEBHOOK_SECRET is not set or empty (it holds the webhook's signing secret)`
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
	if h.Current() != p {
		t.Fatal("the refused policy was put in force")
	}
	h.Check = nil
	if err := h.Reload(); err != nil || h.Current().Alerting == nil {
		t.Fatalf("reload without the check: %v", err)
	}
}
