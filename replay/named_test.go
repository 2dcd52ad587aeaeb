package replay

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/streams"
)

// abusePolicy has a quota, a concurrency limit and velocity rules over a
// custom event type (tighten by attribute, block by device) and logins.
const abusePolicy = `version: 1
routes:
  - {match: "POST /otp", class: otp}
  - {match: "POST /auth/login", class: auth}
  - {match: "* *", class: write}
limits:
  - {name: otp-prefix, by: ["attr:phone_prefix"], rate: 100/h, if: {class: otp}}
  - {name: sms-day, by: [device], quota: 3/day, if: {class: otp}}
  - {name: exports, by: [user], concurrency: 1, if: {class: write}}
risk:
  velocity:
    - {name: otp-pumping, event: otp_sent, by: "attr:phone_prefix", threshold: 3, window: 10m, action: tighten, multiplier: 0.01, duration: 1h}
    - {name: otp-device, event: otp_sent, by: device, threshold: 4, window: 10m, action: block, duration: 1h}
    - {name: fails, event: login_failed, by: account, threshold: 1, window: 10m, action: lockout, duration: 15m}
`

// section returns the part of md from the heading that starts with
// title to the next "## " heading.
func section(md, title string) string {
	i := strings.Index(md, "## "+title)
	if i < 0 {
		return ""
	}
	rest := md[i+3:]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j+1]
	}
	return "## " + rest
}

// TestReplayerNamesMeasures: the report counts quotas, concurrency limits
// and velocity rules over custom events, and names the subject and time of
// every lockout, tighten and block the candidate's rules set, the first
// MaxNamed per rule and a count of the rest.
func TestReplayerNamesMeasures(t *testing.T) {
	t.Parallel()
	r, err := NewReplayer(Policies{Candidate: mustParse(t, "abuse.yaml", abusePolicy), Baseline: mustParse(t, "loose.yaml", loosePolicy),
		CandidateName: "abuse.yaml", BaselineName: "loose.yaml"}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ts := t0
	next := func() time.Time { ts = ts.Add(time.Second); return ts }
	// d-2 asks for 5 OTPs: the daily quota of 3 denies 2
	for range 5 {
		r.Decision(&streams.Decision{TS: next(), Endpoint: "POST /otp", IP: "198.51.100.2", DeviceID: "d-2", Cost: 1,
			Attributes: map[string]string{"phone_prefix": "4420"}})
	}
	// u1 runs 3 exports one after the other: each frees its slot
	for range 3 {
		r.Decision(&streams.Decision{TS: next(), Endpoint: "POST /exports", IP: "198.51.100.3", UserID: "u1", Cost: 1})
	}
	// d-1 sends 4 OTPs to +4479: the prefix is tightened at the 3rd, the
	// device blocked at the 4th (on the claim subject: no device token, 7.1)
	for range 4 {
		r.Report(&streams.Report{TS: next(), Type: "otp_sent", DeviceID: "d-1", Attributes: map[string]string{"phone_prefix": "4479"}})
	}
	// 25 accounts fail a login each: 25 lockouts, 20 named
	for i := range 25 {
		r.Report(&streams.Report{TS: next(), Type: streams.ReportLoginFailed, Account: fmt.Sprintf("acc-%02d", i)})
	}
	r.Decision(&streams.Decision{TS: next(), Endpoint: "POST /auth/login", IP: "198.51.100.9", Account: "acc-00", Cost: 1})
	rep := r.Result()
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	limits := "## Per limit and route class\n\n" +
		"A request denied by several limits counts under each; lockouts and step-ups count under their velocity rule. Kind: bucket, quota or concurrency for a limit, lockout or step_up for a velocity rule, list for an allow or deny list.\n\n" +
		"| class | limit | kind | requests | denied (baseline) | denied (candidate) | newly denied | newly allowed |\n" +
		"| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |\n" +
		"| `auth` | `fails` | lockout | 1 | 0 | 1 | 1 | 0 |\n" +
		"| `auth` | `login-account` | bucket | 1 | 0 | 0 | 0 | 0 |\n" +
		"| `otp` | `otp-prefix` | bucket | 5 | 0 | 0 | 0 | 0 |\n" +
		"| `otp` | `sms-day` | quota | 5 | 0 | 2 | 2 | 0 |\n" +
		"| `write` | `exports` | concurrency | 3 | 0 | 0 | 0 | 0 |\n" +
		"| `write` | `user-write` | bucket | 3 | 0 | 0 | 0 | 0 |\n\n"
	if got := section(md.String(), "Per limit"); got != limits {
		t.Errorf("limits section\n%s\nwant\n%s", got, limits)
	}
	var named strings.Builder
	named.WriteString("## Who the candidate's rules would have locked out, stepped up, tightened or blocked\n\n" +
		"### `fails` (lockout): 25\n\n| subject | id | at | until |\n| --- | --- | --- | --- |\n")
	for i := range MaxNamed {
		at := t0.Add(time.Duration(13+i) * time.Second)
		fmt.Fprintf(&named, "| `account` | `acc-%02d` | %s | %s |\n", i, at.Format(time.RFC3339Nano), at.Add(15*time.Minute).Format(time.RFC3339Nano))
	}
	named.WriteString("\nand 5 more (the first 20 are named).\n\n" +
		"### `otp-device` (block): 1\n\n| subject | id | at | until |\n| --- | --- | --- | --- |\n" +
		"| `claim` | `d-1` | 2026-11-30T12:00:12Z | 2026-11-30T13:00:12Z |\n\n" +
		"### `otp-pumping` (tighten): 1\n\n| subject | id | at | until |\n| --- | --- | --- | --- |\n" +
		"| `attr:phone_prefix` | `4479` | 2026-11-30T12:00:11Z | 2026-11-30T13:00:11Z |\n\n")
	if got := section(md.String(), "Who the candidate"); got != named.String() {
		t.Errorf("named section\n%s\nwant\n%s", got, named.String())
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if want := `"named": [
        {
          "subject": "claim",
          "id": "d-1",
          "at": "2026-11-30T12:00:12Z",
          "until": "2026-11-30T13:00:12Z"
        }
      ]`; !strings.Contains(js.String(), want) {
		t.Errorf("JSON lacks the block's name:\n%s", js.String())
	}
}

// TestReplayerNamesStepUps: a candidate's step_up rule over a custom event
// is named like the other measures: each account it would have stepped
// up, when and until when, and the payment it would then have refused
// counts under the rule.
func TestReplayerNamesStepUps(t *testing.T) {
	t.Parallel()
	const candidate = `version: 1
routes:
  - {match: "POST /payments", class: payment}
  - {match: "* *", class: write}
limits:
  - {name: pay-account, by: [account], rate: 100/h, if: {class: payment}}
risk:
  velocity:
    - {name: card-testing, event: payment_declined, by: account, threshold: 2, window: 1h, action: step_up, duration: 1h, classes: [payment]}
`
	r, err := NewReplayer(Policies{Candidate: mustParse(t, "c.yaml", candidate), Baseline: mustParse(t, "loose.yaml", loosePolicy),
		CandidateName: "c.yaml", BaselineName: "loose.yaml"}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ts := t0
	next := func() time.Time { ts = ts.Add(time.Second); return ts }
	for _, acc := range []string{"carded", "carded", "honest", "other", "other"} {
		r.Report(&streams.Report{TS: next(), Type: "payment_declined", Account: acc})
	}
	r.Decision(&streams.Decision{TS: next(), Endpoint: "POST /payments", IP: "198.51.100.9", Account: "carded", Cost: 1})
	rep := r.Result()
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	want := "## Who the candidate's rules would have locked out, stepped up, tightened or blocked\n\n" +
		"### `card-testing` (step_up): 2\n\n| subject | id | at | until |\n| --- | --- | --- | --- |\n" +
		"| `account` | `carded` | 2026-11-30T12:00:02Z | 2026-11-30T13:00:02Z |\n" +
		"| `account` | `other` | 2026-11-30T12:00:05Z | 2026-11-30T13:00:05Z |\n\n"
	if got := section(md.String(), "Who the candidate"); got != want {
		t.Errorf("named section\n%s\nwant\n%s", got, want)
	}
	if row := "| `payment` | `card-testing` | step_up | 1 | 0 | 1 | 1 | 0 |\n"; !strings.Contains(md.String(), row) {
		t.Errorf("no row %q in\n%s", row, md.String())
	}
}
