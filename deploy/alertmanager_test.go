package deploy_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// routesFile is the Alertmanager route tree docs/alerting.md quotes.
const routesFile = "alertmanager/tollgate-routes.yml"

// TestAlertmanagerRouteTree checks the shipped route tree with amtool
// (check-config, and which receiver each Tollgate alert reaches: lockouts
// and blocks page, the other kinds go to the channel) and loads it into a
// real Alertmanager, which must run with it.
func TestAlertmanagerRouteTree(t *testing.T) {
	amtool := testenv.AmtoolPath(t)
	file := filepath.Join(dir(t), routesFile)
	if out, err := exec.Command(amtool, "check-config", file).CombinedOutput(); err != nil {
		t.Fatalf("amtool check-config %s: %v\n%s", routesFile, err, out)
	}
	for _, tc := range []struct {
		labels []string
		want   string
	}{
		{[]string{"alertname=TollgateLockout", "severity=critical", "team=security", "kind=lockout"}, "security-pager"},
		{[]string{"alertname=TollgateBlock", "severity=critical", "team=security", "kind=block"}, "security-pager"},
		{[]string{"alertname=TollgateAnomaly", "severity=warning", "team=security", "kind=anomaly"}, "security-channel"},
		{[]string{"alertname=TollgateRepeatOffender", "severity=warning", "team=security"}, "security-channel"},
		{[]string{"alertname=TollgateTighten", "severity=warning", "team=security"}, "security-channel"},
	} {
		args := append([]string{"config", "routes", "test", "--config.file=" + file}, tc.labels...)
		out, err := exec.Command(amtool, args...).Output()
		if err != nil {
			t.Fatalf("amtool %s: %v", strings.Join(args, " "), err)
		}
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("%v routes to %q, want %q", tc.labels, got, tc.want)
		}
	}

	am := testenv.StartAlertmanager(t, string(readFile(t, routesFile)))
	resp, err := http.Get("http://" + am.Addr + "/api/v2/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var st struct {
		Config struct {
			Original string `json:"original"`
		} `json:"config"`
	}
	if err := json.Unmarshal(body, &st); err != nil || !strings.Contains(st.Config.Original, "security-pager") {
		t.Fatalf("Alertmanager status %s: %v (the route tree is not loaded)", body, err)
	}
}
