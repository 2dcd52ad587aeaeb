package policy

import (
	"fmt"
	"strings"
	"testing"
)

// TestMaxApplicable: a policy where more than MaxApplicable limits can
// apply to one request of some class is refused at the first limit past
// the cap; class and authentication conditions are counted, attribute
// conditions taken as "may apply".
func TestMaxApplicable(t *testing.T) {
	t.Parallel()
	// limitsText returns n limits, the i-th with the condition cond(i).
	limitsText := func(n int, cond func(i int) string) string {
		var b strings.Builder
		b.WriteString("version: 1\nroutes:\n  - {match: \"POST /auth/login\", class: auth}\nlimits:\n")
		for i := 1; i <= n; i++ {
			fmt.Fprintf(&b, "  - {name: l%d, by: [ip], rate: 1/s%s}\n", i, cond(i))
		}
		return b.String()
	}
	none := func(int) string { return "" }
	for _, c := range []struct {
		name, text, wantErr string
	}{
		{"32 limits", limitsText(32, none), ""},
		{"33 limits", limitsText(33, none), `p.yaml:37: limit "l33": more than 32 limits (the most one request may be checked against) can apply to a request of class auth, not authenticated`},
		{"33 split by class", limitsText(33, func(i int) string {
			if i%2 == 0 {
				return ", if: {class: auth}"
			}
			return ", if: {class: default}"
		}), ""},
		{"33 split by authentication", limitsText(33, func(i int) string {
			return fmt.Sprintf(", if: {authenticated: %t}", i%2 == 0)
		}), ""},
		{"33 for authenticated auth", limitsText(41, func(i int) string {
			switch {
			case i <= 8:
				return ", if: {authenticated: false}"
			case i <= 20:
				return ", if: {class: auth}"
			}
			return ", if: {authenticated: true}"
		}), `p.yaml:45: limit "l41"`},
		{"attributes may apply", limitsText(33, func(i int) string {
			return fmt.Sprintf(", if: {attr: {plan: p%d}}", i)
		}), `p.yaml:37: limit "l33": more than 32 limits`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("p.yaml", []byte(c.text))
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("Parse = %v, want no error", err)
			case c.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), c.wantErr)):
				t.Errorf("Parse = %v, want %s", err, c.wantErr)
			}
		})
	}
}
