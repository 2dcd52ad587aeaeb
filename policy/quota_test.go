package policy

import (
	"bytes"
	"strings"
	"testing"
)

// TestBudgetsKinds: `limiter budgets` shows a quota's budget per calendar
// period and a concurrency limit's slots and lease.
func TestBudgetsKinds(t *testing.T) {
	t.Parallel()
	p, err := Parse("k.yaml", []byte(`version: 1
limits:
  - {name: sms, by: [account], quota: 100/month}
  - {name: exports, by: [user], concurrency: 2}
  - {name: daily, by: [ip], rate: 500/day}
`))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := p.WriteBudgets(&buf); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		"| default | sms | account | 100/month (quota, UTC) | 100 | open |",
		"| default | exports | user | 2 in flight (lease 1m0s) | 2 | open |",
		"| default | daily | ip | 500/day | 500 | open |",
	} {
		if !strings.Contains(buf.String(), row+"\n") {
			t.Errorf("no row %q in\n%s", row, buf.String())
		}
	}
}
