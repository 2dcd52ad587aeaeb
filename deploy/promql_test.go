package deploy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// A small PromQL scanner: it finds the metric names an expression selects
// and the label names of each selector's matchers, and checks that strings,
// braces, brackets and parentheses are well formed. It is not a parser (the
// module does not depend on github.com/prometheus/prometheus); promtool, when
// installed, checks the full syntax.

// selector is one vector selector of an expression.
type selector struct {
	metric string
	labels []string // label names of its matchers, __name__ excluded
}

var (
	// aggregations may be followed by by/without before their parentheses.
	aggregations = map[string]bool{
		"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true,
		"stdvar": true, "count": true, "count_values": true, "bottomk": true, "topk": true,
		"quantile": true, "limitk": true, "limit_ratio": true,
	}
	// groupings are followed by a parenthesized list of label names.
	groupings = map[string]bool{
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	}
	// keywords are neither metrics nor functions.
	keywords = map[string]bool{
		"bool": true, "offset": true, "and": true, "or": true, "unless": true, "atan2": true,
		"inf": true, "nan": true,
	}
)

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdentChar(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(s string, i int) int {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

// readString reads the quoted string at s[i] and returns its (unescaped
// enough for label values) content and the index after it.
func readString(s string, i int) (string, int, error) {
	q := s[i]
	var b strings.Builder
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			if j+1 >= len(s) {
				return "", 0, fmt.Errorf("unterminated string at %d", i)
			}
			j++
			b.WriteByte(s[j])
		case s[j] == q:
			return b.String(), j + 1, nil
		case s[j] == '\n' && q != '`':
			return "", 0, fmt.Errorf("newline in string at %d", i)
		default:
			b.WriteByte(s[j])
		}
	}
	return "", 0, fmt.Errorf("unterminated string at %d", i)
}

func readIdent(s string, i int) (string, int) {
	j := i
	for j < len(s) && isIdentChar(s[j]) {
		j++
	}
	return s[i:j], j
}

// readMatchers reads the matcher list at s[i] == '{' and returns the label
// names, the values of __name__="..." matchers and the index after '}'.
func readMatchers(s string, i int) (labels, names []string, next int, err error) {
	i++
	for {
		i = skipSpace(s, i)
		if i >= len(s) {
			return nil, nil, 0, fmt.Errorf("unterminated {")
		}
		if s[i] == '}' {
			return labels, names, i + 1, nil
		}
		if s[i] == ',' {
			i++
			continue
		}
		if !isIdentStart(s[i]) {
			return nil, nil, 0, fmt.Errorf("label name expected at %d: %q", i, s[i:])
		}
		var name string
		name, i = readIdent(s, i)
		i = skipSpace(s, i)
		var op string
		for _, o := range []string{"=~", "!~", "!=", "="} {
			if strings.HasPrefix(s[i:], o) {
				op = o
				break
			}
		}
		if op == "" {
			return nil, nil, 0, fmt.Errorf("matcher operator expected after %q at %d", name, i)
		}
		i = skipSpace(s, i+len(op))
		if i >= len(s) || (s[i] != '"' && s[i] != '\'' && s[i] != '`') {
			return nil, nil, 0, fmt.Errorf("quoted value expected for label %q", name)
		}
		var val string
		if val, i, err = readString(s, i); err != nil {
			return nil, nil, 0, err
		}
		if name == "__name__" {
			if op == "=" {
				names = append(names, val)
			}
			continue
		}
		labels = append(labels, name)
	}
}

// parseSelectors scans a PromQL expression (Grafana's $variables allowed)
// and returns its vector selectors.
func parseSelectors(s string) ([]selector, error) {
	var out []selector
	var stack []byte // open ( [ {
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case isSpace(c):
			i++
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			_, j, err := readString(s, i)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '{':
			// A selector without a metric name: {__name__="x"}.
			labels, names, j, err := readMatchers(s, i)
			if err != nil {
				return nil, err
			}
			if len(names) == 0 {
				return nil, fmt.Errorf("selector without a metric name at %d", i)
			}
			for _, n := range names {
				out = append(out, selector{metric: n, labels: labels})
			}
			i = j
		case c == '[':
			// Range or subquery: durations, Grafana's $__rate_interval.
			j := strings.IndexByte(s[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("unterminated [ at %d", i)
			}
			if strings.ContainsAny(s[i+1:i+j], "[{}()\"") {
				return nil, fmt.Errorf("bad range %q", s[i:i+j+1])
			}
			i += j + 1
		case c == '$':
			// Grafana variable outside a string: ${name} or $name.
			i++
			if i < len(s) && s[i] == '{' {
				j := strings.IndexByte(s[i:], '}')
				if j < 0 {
					return nil, fmt.Errorf("unterminated ${ at %d", i)
				}
				i += j + 1
			} else {
				_, i = readIdent(s, i)
			}
		case isDigit(c) || c == '.' && i+1 < len(s) && isDigit(s[i+1]):
			j := i
			for j < len(s) && (isIdentChar(s[j]) || s[j] == '.') {
				if (s[j] == 'e' || s[j] == 'E') && j+1 < len(s) && (s[j+1] == '+' || s[j+1] == '-') &&
					!strings.HasPrefix(strings.ToLower(s[i:]), "0x") {
					j++
				}
				j++
			}
			i = j
		case isIdentStart(c):
			id, j := readIdent(s, i)
			k := skipSpace(s, j)
			var next byte
			if k < len(s) {
				next = s[k]
			}
			low := strings.ToLower(id)
			switch {
			case groupings[low]:
				if next == '(' {
					e := strings.IndexByte(s[k:], ')')
					if e < 0 {
						return nil, fmt.Errorf("unterminated %s( at %d", id, k)
					}
					j = k + e + 1
				}
			case keywords[low], aggregations[id], next == '(':
				// keyword, aggregation or function call
			default:
				sel := selector{metric: id}
				if next == '{' {
					labels, names, e, err := readMatchers(s, k)
					if err != nil {
						return nil, err
					}
					if len(names) > 0 {
						return nil, fmt.Errorf("metric %s also has a __name__ matcher", id)
					}
					sel.labels, j = labels, e
				}
				out = append(out, sel)
			}
			i = j
		case c == '(':
			stack = append(stack, c)
			i++
		case c == ')':
			if len(stack) == 0 {
				return nil, fmt.Errorf("unbalanced ) at %d", i)
			}
			stack = stack[:len(stack)-1]
			i++
		case strings.IndexByte("+-*/%^=!<>,@:", c) >= 0:
			i++
		default:
			return nil, fmt.Errorf("unexpected %q at %d", c, i)
		}
	}
	if len(stack) > 0 {
		return nil, fmt.Errorf("unbalanced ( in %q", s)
	}
	return out, nil
}

func TestParseSelectors(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string // metric[label,label]
	}{
		{`up`, []string{"up[]"}},
		{`up{job="tollgate-riskd"} == 0 or absent(up{job="tollgate-riskd"})`, []string{"up[job]", "up[job]"}},
		{`sum by (limit, class) (rate(a_total{result="limited", class=~"$class"}[$__rate_interval])) / on (limit) group_left (x) sum without (le) (b)`,
			[]string{"a_total[result class]", "b[]"}},
		{`histogram_quantile(0.99, sum(rate(h_bucket[5m])) by (le)) > bool 1e-3 offset 1h`, []string{"h_bucket[]"}},
		{`topk(5, {__name__="x_total", op!="a"}) * 60 # comment sum`, []string{"x_total[op]"}},
		{`label_replace(m:rec:rate5m, "dst", "$1", "src", "(.*)")`, []string{"m:rec:rate5m[]"}},
		{`max_over_time(rate(c[1m])[5m:1m]) and count_values("v", g) unless vector(1)`, []string{"c[]", "g[]"}},
		{`sum(x) BY (a)`, []string{"x[]"}},
	} {
		sels, err := parseSelectors(tc.expr)
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
			continue
		}
		var got []string
		for _, s := range sels {
			got = append(got, s.metric+"["+strings.Join(s.labels, " ")+"]")
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.expr, got, tc.want)
		}
	}
	for _, bad := range []string{`sum(rate(x[5m])`, `x{a="b"`, `x{a}`, `rate(x[5m)`, `x{a="b}`, `sum(x))`, `x ~ y`} {
		if _, err := parseSelectors(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
