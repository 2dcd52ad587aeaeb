package alerting

import (
	"strings"
	"testing"

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
