package policy

import "testing"

// TestReadsAccount: the proxy reads the account on class auth, on a class
// a limit keyed by account names in its `if`, and on a class an account
// lock rule is enforced on; not on a class only a limit without `if`
// keyed by account, or an ip lock, reaches.
func TestReadsAccount(t *testing.T) {
	p, err := Parse("p.yaml", []byte(`version: 1
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "POST /otp/verify", class: otp}
  - {match: "POST /reset",      class: reset}
  - {match: "POST /search",     class: search}
  - {match: "GET *",            class: read}
limits:
  - {name: any-account, by: [account],      rate: 100/min}
  - {name: otp-account, by: [ip, account],  rate: 3/min, if: {class: otp}}
risk:
  velocity:
    - {name: resets, event: reset_failed, by: account, threshold: 5, window: 10m, action: lockout, duration: 15m, classes: [reset]}
    - {name: scrapers, event: search_flood, by: ip, threshold: 5, window: 10m, action: lockout, duration: 15m, classes: [search]}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"auth": true, "otp": true, "reset": true, "search": false, "read": false, DefaultClass: false}
	for name, w := range want {
		if got := p.ReadsAccount(p.ClassIndex(name)); got != w {
			t.Errorf("ReadsAccount(%s) = %v, want %v", name, got, w)
		}
	}
	if p.ReadsAccount(-1) || p.ReadsAccount(len(p.Classes)) {
		t.Error("an unknown class reads the account")
	}
}
