package service

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/reputation/reputationtest"
)

// TestReputationFirstRequest: a datacenter IP gets its tighter budget on
// its very first request, an ASN-keyed limit applies to its ASN, an IP of
// no listed range is untouched; an unattested device gets the policy's
// unverified multiplier on its device limit and nothing else.
func TestReputationFirstRequest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "GeoLite2-ASN.mmdb")
	if err := reputationtest.WriteTestDB(db, reputationtest.StandardEntries()); err != nil {
		t.Fatal(err)
	}
	path := writePolicy(t, `version: 1
limits:
  - {name: per-ip, by: [ip], rate: 100/min}
  - {name: per-asn, by: [asn], rate: 1000/min}
  - {name: per-device, by: [device], rate: 60/min}
risk:
  reputation:
    asn_database: `+db+`
    rules:
      - {asns: [16509, 14061], multiplier: 0.25, reason: datacenter}
      - {cidrs: [192.0.2.0/28], multiplier: 0.1, reason: vpn-farm}
  attestation:
    verified_multiplier: 2.0
    unverified_multiplier: 0.5
`)
	_, base := start(t, Config{ConfigPath: path})
	for _, tt := range []struct {
		ip, policy, limit string
	}{
		{"203.0.113.7", `"per-ip";q=25;w=60`, "25"},   // AS16509: 100 x 0.25
		{"198.51.100.9", `"per-ip";q=25;w=60`, "25"},  // AS14061
		{"192.0.2.3", `"per-ip";q=10;w=60`, "10"},     // the CIDR rule
		{"192.0.2.200", `"per-ip";q=100;w=60`, "100"}, // nothing listed
		{"2001:db8::1", `"per-ip";q=100;w=60`, "100"}, // nothing listed
	} {
		resp, body := post(t, base+"/v1/check", `{"endpoint":"GET /","ip":"`+tt.ip+`"}`)
		if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != tt.policy {
			t.Errorf("%s: %d %q %s", tt.ip, resp.StatusCode, resp.Header.Get("RateLimit-Policy"), body)
		}
	}
	// the asn limit applies to the three requests whose IP has an ASN
	// (two datacenters and the IPv6 one), not to the two without
	_, m := get(t, base+"/metrics")
	if !strings.Contains(m, `tollgate_decisions_total{class="default",limit="per-asn",result="allowed"} 3`) {
		t.Errorf("per-asn did not apply to the two datacenter requests:\n%s", grepLines(m, "per-asn"))
	}
	// an unattested device: its device limit is halved (60 -> 30)
	resp, _ := post(t, base+"/v1/check", `{"endpoint":"GET /","ip":"192.0.2.200","device_id":"d1"}`)
	if resp.Header.Get("RateLimit-Policy") != `"per-device";q=30;w=60` {
		t.Errorf("unattested device: %q", resp.Header.Get("RateLimit-Policy"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestASNDatabaseReloads: the ASN watcher swaps in a changed database file
// (the datacenter IP loses its tighter budget once its range is gone from
// the file), keeps the old one when the file is refused, and counts a
// refusal that repeats for the same file once (the next count is the
// repair's).
func TestASNDatabaseReloads(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "GeoLite2-ASN.mmdb")
	if err := reputationtest.WriteTestDB(db, reputationtest.StandardEntries()); err != nil {
		t.Fatal(err)
	}
	path := writePolicy(t, `version: 1
limits:
  - {name: per-ip, by: [ip], rate: 100/min}
risk:
  reputation:
    asn_database: `+db+`
    rules:
      - {asns: [16509], multiplier: 0.25, reason: datacenter}
`)
	_, base := start(t, Config{ConfigPath: path, ASNWatchInterval: 10 * time.Millisecond})
	budget := func() string {
		resp, _ := post(t, base+"/v1/check", `{"endpoint":"GET /","ip":"203.0.113.7"}`)
		return resp.Header.Get("RateLimit-Policy")
	}
	metric := func(result string) string {
		_, m := get(t, base+"/metrics")
		return grepLines(m, `tollgate_asn_database_reloads_total{result="`+result+`"}`)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, func() string {
			if ok() {
				return ""
			}
			return what
		})
	}
	if got := budget(); got != `"per-ip";q=25;w=60` {
		t.Fatalf("first database: %q", got)
	}
	if err := reputationtest.WriteTestDB(db, reputationtest.StandardEntries()[1:]); err != nil {
		t.Fatal(err)
	}
	waitFor("reload", func() bool { return budget() == `"per-ip";q=100;w=60` })
	if got := metric("ok"); !strings.HasSuffix(got, " 1") {
		t.Fatalf("reloads ok: %q, want 1", got)
	}
	if err := os.WriteFile(db+".tmp", []byte("not a database"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(db+".tmp", db); err != nil {
		t.Fatal(err)
	}
	waitFor("refusal", func() bool { return strings.HasSuffix(metric("error"), " 1") })
	if got := budget(); got != `"per-ip";q=100;w=60` {
		t.Fatalf("after the refusal the old database must stay: %q", got)
	}
	// The positive signal: a repaired file is swapped in. The watcher
	// checked the refused file at every tick until then, and counted it
	// once: the next count is the repair's.
	if err := reputationtest.WriteTestDB(db, reputationtest.StandardEntries()); err != nil {
		t.Fatal(err)
	}
	waitFor("repair", func() bool { return budget() == `"per-ip";q=25;w=60` && strings.HasSuffix(metric("ok"), " 2") })
	if got := metric("error"); !strings.HasSuffix(got, " 1") {
		t.Fatalf("a refusal of the same file counted again: %q", got)
	}
}
