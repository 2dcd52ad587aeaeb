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
			want:   []string{"`&lt;!channel&gt; &lt;https://evil.example/reset|reset your password&gt;`", `"&lt;!channel&gt; &lt;https://evil.example/reset|reset your password&gt;"`},
			refuse: []string{"<", ">"},
		},
		{
			name:   "reason and ampersand",
			alert:  streams.Alert{Kind: "tighten", Subject: "attr:tenant", SubjectID: "a&b", Rule: "r", Reason: "<@U123> look <!here>"},
			want:   []string{"`a&amp;b`", ": &lt;@U123&gt; look &lt;!here&gt;\n"},
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
