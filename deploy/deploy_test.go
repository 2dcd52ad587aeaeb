package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/service"
)

const (
	dashboardFile = "grafana/tollgate.json"
	alertsFile    = "prometheus/alerts.yml"
	promConfFile  = "prometheus/prometheus.yml"
	alertsTests   = "prometheus/alerts_test.yml"
	dsUID         = "${DS_PROMETHEUS}"
)

// dir returns the package directory (go test runs tests in it).
// client is the tests' HTTP client. Not http.DefaultClient: closing an
// httptest server (as a test here does) closes the idle connections of
// http.DefaultTransport, which can break a request another test has on one.
var client = &http.Client{Transport: &http.Transport{}}

func dir(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(wd, dashboardFile)); err != nil {
		t.Fatalf("deploy assets not found from %s: %v", wd, err)
	}
	return wd
}

func readFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// query is one PromQL expression of the assets and where it comes from.
type query struct {
	where string
	expr  string
}

// ---------------------------------------------------------------- dashboard

func loadDashboard(t *testing.T) map[string]any {
	t.Helper()
	var d map[string]any
	dec := json.NewDecoder(bytes.NewReader(readFile(t, dashboardFile)))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: invalid JSON: %v", dashboardFile, err)
	}
	if dec.More() {
		t.Fatalf("%s: trailing data after the dashboard object", dashboardFile)
	}
	return d
}

// dashboardExprs returns every "expr" string of the dashboard, at any depth
// (panel targets, annotations).
func dashboardExprs(v any, path string, out *[]query) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if s, ok := x[k].(string); ok && k == "expr" {
				*out = append(*out, query{where: path, expr: s})
				continue
			}
			dashboardExprs(x[k], path+"."+k, out)
		}
	case []any:
		for i, e := range x {
			dashboardExprs(e, fmt.Sprintf("%s[%d]", path, i), out)
		}
	}
}

var labelValuesRe = regexp.MustCompile(`^\s*label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)

// variableQueries returns the metric selectors of the label_values(...)
// query variables.
func variableQueries(t *testing.T, d map[string]any) []query {
	t.Helper()
	var out []query
	for _, v := range templatingList(t, d) {
		if v["type"] != "query" {
			continue
		}
		def, _ := v["definition"].(string)
		m := labelValuesRe.FindStringSubmatch(def)
		if m == nil {
			t.Errorf("variable %v: definition %q is not label_values(selector, label)", v["name"], def)
			continue
		}
		if q, ok := v["query"].(map[string]any); !ok || q["query"] != def {
			t.Errorf("variable %v: query %v differs from its definition %q", v["name"], v["query"], def)
		}
		out = append(out, query{where: fmt.Sprintf("templating %v", v["name"]), expr: m[1]})
	}
	return out
}

func templatingList(t *testing.T, d map[string]any) []map[string]any {
	t.Helper()
	tm, _ := d["templating"].(map[string]any)
	list, _ := tm["list"].([]any)
	var out []map[string]any
	for _, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			t.Fatalf("templating entry %v is not an object", e)
		}
		out = append(out, m)
	}
	return out
}

// panels returns every panel, rows' nested panels included.
func panels(d map[string]any) []map[string]any {
	var out []map[string]any
	var walk func(v any)
	walk = func(v any) {
		list, _ := v.([]any)
		for _, e := range list {
			p, ok := e.(map[string]any)
			if !ok {
				continue
			}
			out = append(out, p)
			walk(p["panels"])
		}
	}
	walk(d["panels"])
	return out
}

func dsIsVariable(v any) bool {
	m, ok := v.(map[string]any)
	return ok && m["type"] == "prometheus" && m["uid"] == dsUID
}

func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	if s, _ := d["schemaVersion"].(json.Number).Int64(); s < 36 || s > 41 {
		t.Errorf("schemaVersion %v, want about 39", d["schemaVersion"])
	}
	for _, k := range []string{"title", "uid", "description"} {
		if s, _ := d[k].(string); s == "" {
			t.Errorf("dashboard has no %s", k)
		}
	}

	vars := map[string]map[string]any{}
	for _, v := range templatingList(t, d) {
		vars[fmt.Sprint(v["name"])] = v
	}
	if ds := vars["DS_PROMETHEUS"]; ds == nil || ds["type"] != "datasource" || ds["query"] != "prometheus" {
		t.Errorf("no datasource variable DS_PROMETHEUS of type prometheus: %v", ds)
	}
	for _, name := range []string{"class", "limit"} {
		v := vars[name]
		if v == nil {
			t.Errorf("no %s variable", name)
			continue
		}
		def, _ := v["definition"].(string)
		if v["type"] != "query" || !strings.HasPrefix(def, "label_values(") || !strings.HasSuffix(def, ", "+name+")") {
			t.Errorf("variable %s: want a label_values(..., %s) query, got %v %q", name, name, v["type"], def)
		}
		if !dsIsVariable(v["datasource"]) {
			t.Errorf("variable %s: datasource %v, want ${DS_PROMETHEUS}", name, v["datasource"])
		}
	}

	ids := map[string]bool{}
	n := 0
	for _, p := range panels(d) {
		id := fmt.Sprint(p["id"])
		title, _ := p["title"].(string)
		if title == "" {
			t.Errorf("panel %s has no title", id)
		}
		if ids[id] {
			t.Errorf("panel id %s is not unique", id)
		}
		ids[id] = true
		gp, _ := p["gridPos"].(map[string]any)
		x, _ := gp["x"].(json.Number).Int64()
		w, _ := gp["w"].(json.Number).Int64()
		h, _ := gp["h"].(json.Number).Int64()
		if w <= 0 || h <= 0 || x < 0 || x+w > 24 {
			t.Errorf("panel %q: bad gridPos %v", title, gp)
		}
		if p["type"] == "row" {
			continue
		}
		n++
		if desc, _ := p["description"].(string); strings.TrimSpace(desc) == "" {
			t.Errorf("panel %q has no description", title)
		}
		if !dsIsVariable(p["datasource"]) {
			t.Errorf("panel %q: datasource %v, want ${DS_PROMETHEUS}", title, p["datasource"])
		}
		targets, _ := p["targets"].([]any)
		if len(targets) == 0 {
			t.Errorf("panel %q has no targets", title)
		}
		for _, tg := range targets {
			m, _ := tg.(map[string]any)
			if e, _ := m["expr"].(string); strings.TrimSpace(e) == "" {
				t.Errorf("panel %q: target without expr", title)
			}
			if !dsIsVariable(m["datasource"]) {
				t.Errorf("panel %q: target datasource %v, want ${DS_PROMETHEUS}", title, m["datasource"])
			}
		}
	}
	if n < 10 {
		t.Errorf("only %d panels", n)
	}

	// The dashboard covers the contract's metrics.
	var exprs []query
	dashboardExprs(d, "dashboard", &exprs)
	used := map[string]bool{}
	for _, q := range exprs {
		sels, err := parseSelectors(q.expr)
		if err != nil {
			t.Errorf("%s: %v in %q", q.where, err, q.expr)
		}
		for _, s := range sels {
			used[s.metric] = true
		}
	}
	for _, m := range []string{
		"tollgate_decisions_total", "tollgate_tokens_remaining_ratio_bucket", "tollgate_decision_seconds_bucket",
		"tollgate_repeat_offenders", "tollgate_store_errors_total", "tollgate_store_circuit_state",
		"tollgate_events_dropped_total", "tollgate_riskd_consumer_lag", "tollgate_riskd_events_total",
		"tollgate_riskd_alerts_total", "tollgate_policy_reloads_total", "tollgate_rls_requests_total",
		"tollgate_list_reloads_total", "tollgate_list_entries", "tollgate_reports_total",
		"tollgate_riskd_velocity_actions_total", "tollgate_decisions_by_kind_total", "tollgate_lease_releases_total",
		"tollgate_attestations_total",
	} {
		if !used[m] {
			t.Errorf("no panel queries %s", m)
		}
	}
}

// ---------------------------------------------------------------- alerts

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         *string           `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	var rf ruleFile
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, alertsFile)))
	dec.KnownFields(true)
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	return rf
}

// ruleExprs returns the rules' expressions and the names recording rules
// define (queryable like exported metrics).
func ruleExprs(rf ruleFile) (qs []query, recorded []string) {
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			name := r.Alert
			if r.Record != "" {
				name = r.Record
				recorded = append(recorded, r.Record)
			}
			qs = append(qs, query{where: fmt.Sprintf("%s group %s rule %s", alertsFile, g.Name, name), expr: r.Expr})
		}
	}
	return qs, recorded
}

func TestAlertRules(t *testing.T) {
	rf := loadRules(t)
	if len(rf.Groups) == 0 {
		t.Fatal("no rule groups")
	}
	seen := map[string]bool{}
	for _, g := range rf.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: no name or no rules", g.Name)
		}
		for _, r := range g.Rules {
			if r.Record != "" {
				continue
			}
			name := r.Alert
			if name == "" {
				t.Errorf("group %s: a rule without alert or record", g.Name)
				continue
			}
			if seen[name] {
				t.Errorf("alert %s defined twice", name)
			}
			seen[name] = true
			if strings.TrimSpace(r.Expr) == "" {
				t.Errorf("%s: no expr", name)
			} else if _, err := parseSelectors(r.Expr); err != nil {
				t.Errorf("%s: %v", name, err)
			}
			if r.For == nil {
				t.Errorf("%s: no for", name)
			} else if _, err := model.ParseDuration(*r.For); err != nil {
				t.Errorf("%s: for %q: %v", name, *r.For, err)
			}
			if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
				t.Errorf("%s: severity %q, want critical, warning or info", name, s)
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", name, a)
				}
			}
		}
	}
	for _, want := range []string{
		"TollgateBlockRateSpike", "TollgateLimitTooTight", "TollgateRedisDown", "TollgateDegraded",
		"TollgateEventsDropped", "TollgateRiskdLagging", "TollgateRiskdDown", "TollgatePolicyReloadFailed",
		"TollgateListReloadFailed", "TollgateAlertDeliveryFailing", "TollgateLockouts", "TollgateAnomalies",
		"TollgateAttestationsBusy",
	} {
		if !seen[want] {
			t.Errorf("alert %s missing", want)
		}
	}
}

// ---------------------------------------------------------------- scrape

// scraped is what one GET /metrics exported: each queryable series name
// with the label names it carries.
type scraped map[string]map[string]bool

func scrape(t *testing.T, base string) scraped {
	t.Helper()
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	out := scraped{}
	add := func(name string, labels map[string]bool, extra ...string) {
		l := map[string]bool{}
		for k := range labels {
			l[k] = true
		}
		for _, k := range extra {
			l[k] = true
		}
		out[name] = l
	}
	for name, f := range fams {
		labels := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = true
			}
		}
		// A classic histogram is queried through its _bucket, _sum and
		// _count series (the bare name selects nothing); a summary through
		// its name (quantiles), _sum and _count.
		switch f.GetType().String() {
		case "HISTOGRAM", "GAUGE_HISTOGRAM":
			add(name+"_bucket", labels, "le")
			add(name+"_sum", labels)
			add(name+"_count", labels)
		case "SUMMARY":
			add(name, labels, "quantile")
			add(name+"_sum", labels)
			add(name+"_count", labels)
		default:
			add(name, labels)
		}
	}
	return out
}

func postJSON(t *testing.T, url, body string) int {
	t.Helper()
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// waitForSeries scrapes until the exposition contains series (a name with
// its labels, as exported).
func waitForSeries(t *testing.T, base, series string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, func() string {
		resp, err := client.Get(base + "/metrics")
		if err != nil {
			return err.Error()
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Contains(b, []byte(series)) {
			return series + " not exported"
		}
		return ""
	})
}

// deployList is the deny list startLimiter's policy adds to the built-in
// one, so that the list metrics are exported (its file is deny.txt).
const deployList = `
lists:
  deploytest-deny: {file: deny.txt, kind: ip}
deny: [deploytest-deny]
`

// startLimiter runs the one-process limiter (memory store, embedded NATS,
// in-process riskd; proxy mode on; Envoy's rate-limit service on) on a
// copy of the built-in policy with a deny list, which it watches, and
// makes it export every labeled series the assets query.
func startLimiter(t *testing.T) string {
	t.Helper()
	tmp := t.TempDir()
	policyPath, listPath := filepath.Join(tmp, "policy.yaml"), filepath.Join(tmp, "deny.txt")
	if err := os.WriteFile(listPath, []byte("192.0.2.0/24\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// An alerting webhook: the lockout below is delivered to it
	// (tollgate_alert_deliveries_total).
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	t.Cleanup(hook.Close)
	deployList := deployList + fmt.Sprintf("alerting:\n  webhooks: [{url: %q, secret_env: TOLLGATE_WEBHOOK_SECRET}]\n", hook.URL)
	if err := os.WriteFile(policyPath, append(policy.Example(), deployList...), 0o600); err != nil {
		t.Fatal(err)
	}
	// Reverse-proxy mode registers the tollgate_proxy_* counters.
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	t.Cleanup(upstream.Close)
	ctx, cancel := context.WithCancel(context.Background())
	r, err := service.Start(ctx, service.Config{
		Listen:        "127.0.0.1:0",
		APIListen:     "127.0.0.1:0",
		GRPCListen:    "127.0.0.1:0", // registers tollgate_rls_requests_total
		Upstream:      upstream.URL,
		ConfigPath:    policyPath,
		WatchInterval: 20 * time.Millisecond,
		Logger:        slog.New(slog.DiscardHandler),
		Getenv:        func(string) string { return "k3y" }, // TOLLGATE_USER_KEY: proxy mode needs it
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		<-r.Done
	})
	base := "http://" + r.APIAddr // the limiter's API and /metrics

	// login-account allows 5/min: the 6th check is limited. 110 more
	// denials make alice's key a repeat offender (per_minute: 100).
	const check = `{"endpoint":"POST /auth/login","ip":"198.51.100.7","account":"alice"}`
	codes := map[int]int{}
	for i := range 116 {
		c := postJSON(t, base+"/v1/check", check)
		if i == 5 && c != http.StatusTooManyRequests {
			t.Fatalf("6th check answered %d, want 429", c)
		}
		codes[c]++
	}
	if codes[200]+codes[429] != 116 || codes[429] <= 100 {
		t.Fatalf("checks answered %v, want over 100 x 429 and the rest 200", codes)
	}
	// Reports: account-failures locks alice out after 10 login_failed
	// (riskd alert kind lockout).
	for range 12 {
		if c := postJSON(t, base+"/v1/report", `{"type":"login_failed","account":"alice","ip":"198.51.100.7"}`); c != http.StatusAccepted {
			t.Fatalf("POST /v1/report: %d", c)
		}
	}
	// An attestation with a body it cannot take (tollgate_attestations_total:
	// the example policy configures no verifier, so a 404, counted invalid).
	if c := postJSON(t, "http://"+r.Addr+"/v1/attest/apple", `{}`); c != http.StatusNotFound {
		t.Fatalf("POST /v1/attest/apple: %d", c)
	}
	// A message riskd cannot decode: tollgate_riskd_errors_total{op="decode"}.
	nc, err := nats.Connect(r.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("tollgate.decisions.deploytest", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	nc.Close()

	// Policy reloads: a refused file, then a good one.
	if err := os.WriteFile(policyPath, []byte("version: 1\nlimits: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitForSeries(t, base, `tollgate_policy_reloads_total{result="error"}`)
	good := append(policy.Example(), deployList+"\n# reloaded by deploy_test\n"...)
	if err := os.WriteFile(policyPath, good, 0o600); err != nil {
		t.Fatal(err)
	}
	waitForSeries(t, base, `tollgate_policy_reloads_total{result="ok"}`)

	// List reloads: a bad line (refused, the old entries stay), then a
	// good file.
	if err := os.WriteFile(listPath, []byte("192.0.2.0/24\nnot-an-ip\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitForSeries(t, base, `tollgate_list_reloads_total{list="deploytest-deny",result="error"}`)
	if err := os.WriteFile(listPath, []byte("192.0.2.0/24\n203.0.113.0/24\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitForSeries(t, base, `tollgate_list_reloads_total{list="deploytest-deny",result="ok"}`)
	return base
}

// TestAssetsQueryExportedMetrics checks that every metric the dashboard and
// the alerts select, with every label their matchers name, is exported by
// the running services: a renamed metric or label breaks this test instead
// of silently emptying a panel or an alert.
func TestAssetsQueryExportedMetrics(t *testing.T) {
	var qs []query
	d := loadDashboard(t)
	dashboardExprs(d, "dashboard", &qs)
	qs = append(qs, variableQueries(t, d)...)
	rq, recorded := ruleExprs(loadRules(t))
	qs = append(qs, rq...)

	type use struct {
		labels map[string][]string // label name -> where its matchers are
		where  []string
	}
	uses := map[string]*use{}
	for _, q := range qs {
		sels, err := parseSelectors(q.expr)
		if err != nil {
			t.Fatalf("%s: %v in %q", q.where, err, q.expr)
		}
		for _, s := range sels {
			u := uses[s.metric]
			if u == nil {
				u = &use{labels: map[string][]string{}}
				uses[s.metric] = u
			}
			for _, l := range s.labels {
				u.labels[l] = append(u.labels[l], q.where)
			}
			u.where = append(u.where, q.where)
		}
	}
	if len(uses) == 0 {
		t.Fatal("no metric referenced")
	}

	base := startLimiter(t)

	// Series set by Prometheus itself, and names the rules define.
	builtin := map[string]map[string]bool{"up": {"job": true, "instance": true}}
	for _, r := range recorded {
		builtin[r] = nil // any label
	}
	problems := func(s scraped) []string {
		var out []string
		for name, u := range uses {
			labels, ok := builtin[name]
			if !ok {
				if labels, ok = s[name]; !ok {
					out = append(out, fmt.Sprintf("%s is not exported (used in %s)", name, strings.Join(u.where, "; ")))
					continue
				}
			}
			if labels == nil {
				continue
			}
			for l, where := range u.labels {
				if !labels[l] && l != "job" && l != "instance" {
					out = append(out, fmt.Sprintf("%s has no label %q (used in %s)", name, l, strings.Join(where, "; ")))
				}
			}
		}
		sort.Strings(out)
		return out
	}
	// riskd consumes asynchronously and samples lag and offenders every
	// second: scrape until everything is there.
	deadline := time.Now().Add(20 * time.Second)
	var s scraped
	for {
		s = scrape(t, base)
		p := problems(s)
		if len(p) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the assets query what the services do not export:\n  %s", strings.Join(p, "\n  "))
		}
		time.Sleep(100 * time.Millisecond)
	}
	names := make([]string, 0, len(uses))
	for n := range uses {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("%d scraped series names; all %d referenced names exported: %s", len(s), len(names), strings.Join(names, ", "))
}

// ---------------------------------------------------------------- promtool

// TestPromtool runs promtool on the assets: the rules and the config must
// pass `check`, the rules' unit tests must pass, and the dashboard's
// expressions (Grafana variables substituted) must parse. scripts/test
// installs promtool (package prometheus); without it the test fails, like
// the gateway tests without caddy or nginx: a check that did not run never
// passes.
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not installed: scripts/test installs it (or apt-get install prometheus)")
	}
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir(t)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
	run("check", "rules", alertsFile)
	run("check", "config", promConfFile)
	run("test", "rules", alertsTests)

	// The dashboard's queries as recording rules, so that promtool parses
	// them.
	var qs []query
	dashboardExprs(loadDashboard(t), "dashboard", &qs)
	grafana := strings.NewReplacer(
		"$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h",
		"$class", ".*", "$limit", ".*", "${class}", ".*", "${limit}", ".*",
	)
	type rec struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rec
	for i, q := range qs {
		e := grafana.Replace(q.expr)
		if strings.Contains(e, "$") {
			t.Errorf("%s: unknown Grafana variable in %q", q.where, q.expr)
		}
		rules = append(rules, rec{Record: fmt.Sprintf("dashboard:query:%d", i), Expr: e})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	run("check", "rules", f)
}
