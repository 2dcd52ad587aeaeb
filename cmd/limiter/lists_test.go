package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateAndBudgetsLists: validate reports a bad list line as the
// list file's FILE:LINE; budgets shows attribute keys, conditions and lists.
func TestValidateAndBudgetsLists(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ips := filepath.Join(dir, "ips.txt")
	if err := os.WriteFile(ips, []byte("203.0.113.0/24\n# ok\n203.0.113.999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "p.yaml")
	text := "version: 1\nlists:\n  bad: {file: ips.txt, kind: ip}\ndeny: [bad]\nlimits:\n" +
		"  - {name: free, by: [ip, attr:plan], rate: 10/min, if: {attr: {plan: free}}}\n"
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"validate", "--config", cfg}, envMap(), &out, &errb); code != 1 ||
		!strings.HasPrefix(errb.String(), ips+`:3: ip entry "203.0.113.999": not a CIDR prefix or IP address`) {
		t.Fatalf("bad list: exit %d, stderr %q", code, errb.String())
	}
	if err := os.WriteFile(ips, []byte("203.0.113.0/24\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"budgets", "--config", cfg}, envMap(), &out, &errb); code != 0 {
		t.Fatalf("budgets: exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"| default | free (plan: free) | ip + attr:plan | 10/min | 10 | open |", "| bad | ip | 1 | deny |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("budgets lack %q:\n%s", want, out.String())
		}
	}
}
