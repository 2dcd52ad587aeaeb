package alerting

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/streams"
)

// TestSlackTextEscapesClientValues: an account name or reason chosen by
// an attacker shows as text in Slack; it cannot mention a channel, post a
// disguised link or close the id's code span.
func TestSlackTextEscapesClientValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		alert  streams.Alert
		want   []string // substrings of the text
		refuse []string // never in the text
	}{
		{
			name:   "mention and link as the account",
			alert:  streams.Alert{Kind: "lockout", Subject: "account", SubjectID: "<!channel> <https://evil.example/reset|reset your password>", Rule: "account-failures"},
			want:   []string{"`&lt;!channel&gt; &lt;https://evil.example/reset|reset your password&gt;`", "of account `&lt;!channel&gt; &lt;https://evil.example/reset|reset your password&gt;` by rule account-failures"},
			refuse: []string{"<", ">"},
		},
		{
			name:   "reason and ampersand",
			alert:  streams.Alert{Kind: "tighten", Subject: "attr:tenant", SubjectID: "a&b", Rule: "r", Reason: "<@U123> look <!here>"},
			want:   []string{"`a&amp;b`", ": `&lt;@U123&gt; look &lt;!here&gt;`\n"},
			refuse: []string{"<", ">", "&b"},
		},
		{
			name:  "backtick leaves the code span closed",
			alert: streams.Alert{Kind: "lockout", Subject: "account", SubjectID: "x` *bold* `y", Rule: "r"},
			want:  []string{"account `x' *bold* 'y`: "},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			text := SlackText(Delivery{Alert: tc.alert})
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("text %q lacks %q", text, w)
				}
			}
			for _, r := range tc.refuse {
				if strings.Contains(text, r) {
					t.Errorf("text %q holds %q", text, r)
				}
			}
		})
	}
}

// TestVerify: Verify takes what Sign makes, and refuses another body,
// another secret, a t beyond the tolerance and a malformed header.
func TestVerify(t *testing.T) {
	t.Parallel()
	secret, body, at := []byte("s3cret"), []byte(`{"kind":"lockout"}`), time.Unix(1_800_000_000, 0)
	h := Sign(secret, at, body)
	if got, err := Verify(secret, h, body, at.Add(time.Minute), 5*time.Minute); err != nil || !got.Equal(at) {
		t.Fatalf("Verify(Sign) = %v, %v; want %v, nil", got, err, at)
	}
	for name, c := range map[string]struct {
		secret []byte
		header string
		body   []byte
		now    time.Time
	}{
		"another body":    {secret, h, []byte(`{"kind":"step_up"}`), at},
		"another secret":  {[]byte("other"), h, body, at},
		"too old":         {secret, h, body, at.Add(6 * time.Minute)},
		"from the future": {secret, h, body, at.Add(-6 * time.Minute)},
		"no t":            {secret, "v1=00", body, at},
		"v1 not hex":      {secret, strings.Replace(h, "v1=", "v1=zz", 1), body, at},
	} {
		if _, err := Verify(c.secret, c.header, c.body, c.now, 5*time.Minute); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
}

// TestVerifyRefusesAnEmptySecret: a receiver whose secret variable is
// unset calls Verify with an empty secret; HMAC takes an empty key, so
// Verify accepted any delivery the attacker signed with the empty key:
// forged lockouts and blocks passed as Tollgate's. An empty secret
// verifies nothing.
func TestVerifyRefusesAnEmptySecret(t *testing.T) {
	t.Parallel()
	body, at := []byte(`{"kind":"block","subject":"ip","id":"198.51.100.7"}`), time.Unix(1_800_000_000, 0)
	for _, secret := range [][]byte{nil, {}} {
		forged := Sign(secret, at, body)
		if _, err := Verify(secret, forged, body, at, 5*time.Minute); err == nil {
			t.Errorf("Verify(%q) took a delivery signed with the empty key", secret)
		}
	}
}

// TestSlackTextShowsIDsOnlyAsCode: Slack makes a link of any bare URL or
// domain in a message, so an account named "https://evil.example/reset"
// put a clickable link to the attacker's page into the security
// channel's lockout alert (the summary and the description repeated the
// id outside its code span). A client-chosen id shows only inside code
// spans, which Slack leaves as text.
func TestSlackTextShowsIDsOnlyAsCode(t *testing.T) {
	t.Parallel()
	for _, a := range []streams.Alert{
		{Kind: "lockout", Subject: "account", SubjectID: "https://evil.example/reset", Rule: "account-failures", Count: 10},
		{Kind: "block", Subject: "attr:tenant", SubjectID: "www.evil.example", Rule: "r", Reason: "pumping"},
		{Kind: "anomaly", Subject: "device", SubjectID: "x`evil.example/`y", Rule: "r", Rate: 5, Baseline: 0.1},
		{Kind: "repeat_offender", Subject: "device", SubjectID: "https://evil.example/r", Rule: "device", Count: 500,
			Reason: `limit device denied key "device|device=https://evil.example/r" 500 times in the last minute (more than 100)`},
	} {
		text := SlackText(Delivery{Alert: a})
		var outside strings.Builder
		for i, part := range strings.Split(text, "`") {
			if i%2 == 0 { // outside the code spans
				outside.WriteString(part)
			}
		}
		if strings.Contains(outside.String(), "evil.example") {
			t.Errorf("the id %q shows outside a code span, as a link: %q", a.SubjectID, text)
		}
	}
}

// TestSlackTextShowsFormatCharacters: an account named with a
// right-to-left override renders as another name in Slack as anywhere:
// "ceo\u202emoc.elpmaxe@" reads ceo@example.com. The id and the reason
// show their format characters as [U+XXXX].
func TestSlackTextShowsFormatCharacters(t *testing.T) {
	t.Parallel()
	for _, a := range []streams.Alert{
		{Kind: "lockout", Subject: "account", SubjectID: "ceo\u202emoc.elpmaxe@", Rule: "account-failures", Count: 10},
		{Kind: "block", Subject: "account", SubjectID: "ceo\u202emoc.elpmaxe@", Rule: "r", Reason: "pumping by ceo\u202emoc.elpmaxe@"},
	} {
		text := SlackText(Delivery{Alert: a})
		if strings.ContainsRune(text, '\u202e') || !strings.Contains(text, "`ceo[U+202E]moc.elpmaxe@`") {
			t.Errorf("%s: %q", a.Kind, text)
		}
	}
}
