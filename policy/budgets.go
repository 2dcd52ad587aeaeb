package policy

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// WriteBudgets writes the policy as Markdown for the teams that call the
// API (what `limiter budgets` prints): a table of routes and their classes,
// then one row per route class and limit that applies to it, with the
// limit's key, rate, burst and failure mode. Limits restricted by
// `if.authenticated` are marked "(authenticated)" or "(unauthenticated)";
// shadow limits "(shadow)".
func (p *Policy) WriteBudgets(w io.Writer) error {
	bw := bufio.NewWriter(w)
	source := p.Source
	if source == "" {
		source = "built-in policy"
	}
	fmt.Fprintf(bw, "# Rate-limit budgets (%s)\n\n", mdEscape(source))

	bw.WriteString("## Routes\n\nFirst match wins; `*` matches any run of characters, `/` included.\n\n")
	bw.WriteString("| route | class |\n| --- | --- |\n")
	catchAll := false
	for i := range p.Routes {
		r := &p.Routes[i]
		fmt.Fprintf(bw, "| %s | %s |\n", mdCode(r.Match), r.Class)
		if r.Method == "*" && r.Pattern == "*" {
			catchAll = true
			break
		}
	}
	switch {
	case len(p.Routes) == 0:
		fmt.Fprintf(bw, "| any request | %s |\n", DefaultClass)
	case !catchAll:
		fmt.Fprintf(bw, "| anything else | %s |\n", DefaultClass)
	}

	bw.WriteString("\n## Budgets\n\nEvery limit of a request's class applies; a request is allowed only if all allow it. ")
	bw.WriteString("A limit whose key includes `user` applies only to authenticated requests; one keyed by `device` or `account` only when the request carries one.\n\n")
	bw.WriteString("| route class | limit | key | rate | burst | failure mode |\n")
	bw.WriteString("| --- | --- | --- | --- | --- | --- |\n")
	for c, class := range p.Classes {
		for _, l := range p.classLimits(c) {
			name := l.Name
			if l.IfAuthenticated != nil {
				if *l.IfAuthenticated {
					name += " (authenticated)"
				} else {
					name += " (unauthenticated)"
				}
			}
			if l.Shadow {
				name += " (shadow)"
			}
			if l.TrustedOwn {
				name += " (trusted devices: own)"
			}
			if l.LocalShare > 0 {
				name += " (local share " + l.LocalShare.String() + ")"
			}
			name += attrText(l.IfAttr)
			fmt.Fprintf(bw, "| %s | %s | %s | %s | %s | %s |\n",
				class, mdEscape(name), keyText(l), mdEscape(kindText(l)),
				strconv.FormatFloat(l.Burst, 'f', -1, 64), p.FailureModeOf(l, c))
		}
	}
	p.writeTrusted(bw)
	p.writeShared(bw)
	p.writeLists(bw)
	return bw.Flush()
}

// writeTrusted explains `trusted_devices: own` when a limit sets it.
func (p *Policy) writeTrusted(bw *bufio.Writer) {
	for i := range p.Limits {
		if p.Limits[i].TrustedOwn {
			bw.WriteString("\nA limit marked \"(trusted devices: own)\" gives each trusted device of the request's account ")
			bw.WriteString("(one that sent its device token with a successful login within `risk.attestation.trusted_for`) ")
			bw.WriteString("a budget of its own, with the limit's rate and burst, keyed by the limit's key plus the device; ")
			bw.WriteString("every other request to the account shares the limit's budget, so others spending it never deny that device.\n")
			return
		}
	}
}

// writeShared explains `local_share` when a limit sets it.
func (p *Policy) writeShared(bw *bufio.Writer) {
	for i := range p.Limits {
		if p.Limits[i].LocalShare > 0 {
			bw.WriteString("\nA limit marked \"(local share D)\" is served by each limiter from tokens it takes from Redis ")
			bw.WriteString("ahead of use once its key is hot (twice what it asked for in the last D, at most D's worth): it never admits more than its budget, and may refuse early ")
			bw.WriteString("by what the limiters hold (1.5 shares each at most).\n")
			return
		}
	}
}

// attrText describes a limit's `if.attr` ("" when it has none):
// " (plan: free or trial; tenant: acme)".
func attrText(conds []AttrCondition) string {
	if len(conds) == 0 {
		return ""
	}
	parts := make([]string, len(conds))
	for i, c := range conds {
		parts[i] = c.Name + ": " + orList(c.Values)
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// writeLists writes the allow and deny lists, when the policy has any.
func (p *Policy) writeLists(bw *bufio.Writer) {
	if !p.HasLists() {
		return
	}
	bw.WriteString("\n## Allow and deny lists\n\nA request on a deny list is answered 403 `DENIED`; ")
	bw.WriteString("else one on an allow list is exempt from every limit above.\n\n")
	bw.WriteString("| list | matches | entries | effect |\n| --- | --- | --- | --- |\n")
	for _, group := range []struct {
		lists  []*List
		effect string
	}{{p.Deny, "deny"}, {p.Allow, "allow"}} {
		for _, l := range group.lists {
			n := 0
			if s := l.Set(); s != nil {
				n = s.Len()
			}
			fmt.Fprintf(bw, "| %s | %s | %d | %s |\n", mdEscape(l.Name), l.KindText(), n, group.effect)
		}
	}
}

// classLimits lists, in file order, the limits that apply to some request
// of class c, authenticated or not.
func (p *Policy) classLimits(c int) []*Limit {
	unauth, auth := p.Applicable(c, false), p.Applicable(c, true)
	out := make([]*Limit, 0, len(unauth)+len(auth))
	i, j := 0, 0
	for i < len(unauth) || j < len(auth) {
		switch {
		case j == len(auth) || i < len(unauth) && unauth[i].Index < auth[j].Index:
			out = append(out, unauth[i])
			i++
		case i == len(unauth) || auth[j].Index < unauth[i].Index:
			out = append(out, auth[j])
			j++
		default: // the same limit
			out = append(out, unauth[i])
			i++
			j++
		}
	}
	return out
}

// keyText joins a limit's key parts with " + ".
func keyText(l *Limit) string {
	parts := make([]string, len(l.By))
	for i := range l.By {
		parts[i] = l.PartName(i)
	}
	return strings.Join(parts, " + ")
}

// rateText returns the rate as written, or rebuilds it for a hand-made Limit.
func rateText(l *Limit) string {
	if l.RateText != "" {
		return l.RateText
	}
	unit := "s"
	switch l.Period {
	case time.Minute:
		unit = "min"
	case time.Hour:
		unit = "h"
	case 24 * time.Hour:
		unit = "day"
	}
	return strconv.FormatFloat(l.Rate, 'f', -1, 64) + "/" + unit
}

// mdEscape escapes the characters that would break a Markdown table cell.
func mdEscape(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}

// mdCode writes s as inline code in a table cell.
func mdCode(s string) string {
	return "`" + mdEscape(strings.ReplaceAll(s, "`", "'")) + "`"
}
