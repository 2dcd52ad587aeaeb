package policy

import (
	"strings"
	"testing"
	"time"
)

func TestLocalShare(t *testing.T) {
	p, err := Parse("s.yaml", []byte("version: 1\nlimits:\n  - {name: all, by: [global], rate: 10000/s, local_share: 5ms}\n  - {name: ip, by: [ip], rate: 10/s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Limits[0].LocalShare; got != 5*time.Millisecond {
		t.Errorf("local_share = %v", got)
	}
	if got := p.Limits[1].LocalShare; got != 0 {
		t.Errorf("unshared limit: local_share = %v", got)
	}
	var b strings.Builder
	if err := p.WriteBudgets(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| all (local share 5ms) |") || !strings.Contains(b.String(), "A limit marked \"(local share D)\"") {
		t.Errorf("budgets do not mark the shared limit:\n%s", b.String())
	}
	head := "version: 1\nlimits:\n"
	for _, tc := range []struct{ text, want string }{
		{"  - {name: a, by: [global], rate: 10000/s, local_share: 0.5ms}\n", `s.yaml:3: local_share 500µs: must be between 1ms and 1s`},
		{"  - {name: a, by: [global], rate: 10000/s, local_share: 2s}\n", `s.yaml:3: local_share 2s: must be between 1ms and 1s`},
		{"  - {name: a, by: [global], rate: 100/s, local_share: 5ms}\n", `s.yaml:3: local_share: rate 100/s refills less than one token in 5ms: a share would hold nothing (raise it, or drop local_share: a limit this slow is no hot key)`},
		{"  - {name: a, by: [global], quota: 1000/day, local_share: 5ms}\n", `s.yaml:3: local_share: only a rate limit can be shared (a quota or a concurrency limit is counted exactly in the store)`},
		{"  - {name: a, by: [account], rate: 100000/s, trusted_devices: own, local_share: 5ms}\n", `s.yaml:3: local_share: a limit with trusted_devices: own keeps a bucket per device, which no share serves`},
	} {
		_, err := Parse("s.yaml", []byte(head+tc.text))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: err = %v\nwant %s", strings.TrimSpace(tc.text), err, tc.want)
		}
	}
}
