package console

import (
	"bytes"
	"fmt"
	"html/template"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/visible"
)

// pageNames are the templates of templates/, each parsed with layout.html.
var pageNames = []string{"signin", "error", "overview", "lockouts", "multipliers", "offenders", "subjects", "audit", "alerts"}

// nav is the navigation bar: path and label.
var nav = []struct{ Path, Label string }{
	{"/console/", "Overview"}, {"/console/lockouts", "Lockouts"}, {"/console/multipliers", "Multipliers"},
	{"/console/offenders", "Offenders"}, {"/console/subjects", "Subjects"}, {"/console/audit", "Audit"}, {"/console/alerts", "Alerts"},
}

var funcs = template.FuncMap{
	"at":         at,
	"short":      func(t time.Time) string { return t.UTC().Format("Jan 2 15:04:05") + " UTC" },
	"rel":        rel,
	"num":        num,
	"mult":       mult,
	"nav":        func() any { return nav },
	"kinds":      func() []string { return subjectKinds },
	"bar":        bar,
	"minus":      func(a, b int) int { return a - b },
	"slot":       func(i, n int) int { return (16-n+i)*10 + 1 }, // the chart has 16 slots, the current minute last
	"label":      func(s string) string { return strings.ReplaceAll(s, "_", " ") },
	"derefb":     func(b *bool) bool { return b != nil && *b },
	"subjectURL": subjectURL,
	"shown":      visible.Format, // ids and reasons are the client's choosing
	"host":       host,
	"listLimit":  func() int { return listLimit },
	"pf": func(f *float64) float64 {
		if f == nil {
			return 0
		}
		return *f
	},
	"ptime": func(t *time.Time) time.Time {
		if t == nil {
			return time.Time{}
		}
		return *t
	},
}

// parsePages parses every page with the layout.
func parsePages() (map[string]*template.Template, error) {
	out := make(map[string]*template.Template, len(pageNames))
	for _, n := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+n+".html")
		if err != nil {
			return nil, fmt.Errorf("console: parse template %s: %w", n, err)
		}
		out[n] = t
	}
	return out, nil
}

// render writes page with v and status.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, v view) {
	if v.Now.IsZero() {
		v.Now = c.o.Now().UTC()
	}
	if v.Path == "" {
		v.Path = r.URL.Path
	}
	var buf bytes.Buffer
	if err := c.pages[page].Execute(&buf, v); err != nil {
		c.o.Logger.Error("console: render", "page", page, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// subjectURL is the console path of a subject's page, its kind and id
// query-escaped: an id is whatever a client sent ("ceo@example.com#x",
// "a&id=b", "alice+1@example.com"), and a change made on the page must
// return to that subject's page, not another's.
func subjectURL(subject, id string) string {
	return "/console/subjects?subject=" + url.QueryEscape(subject) + "&id=" + url.QueryEscape(id)
}

// host is the host of an address host:port (addr itself when it has
// no port).
func host(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// at formats t in UTC ("" for the zero time).
func at(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// rel says how far t is from now: "in 12 min", "3 h ago", "just now",
// "never" for the zero time.
func rel(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := t.Sub(now)
	future := d > 0
	if !future {
		d = -d
	}
	var s string
	switch {
	case d < 10*time.Second:
		return "just now"
	case d < time.Minute:
		s = strconv.Itoa(int(d/time.Second)) + " s"
	case d < time.Hour:
		s = strconv.Itoa(int(math.Round(d.Minutes()))) + " min"
	case d < 48*time.Hour:
		h := int(d / time.Hour)
		if m := int((d % time.Hour) / time.Minute); m > 0 && h < 10 {
			s = fmt.Sprintf("%d h %d min", h, m)
		} else {
			s = strconv.Itoa(h) + " h"
		}
	default:
		s = strconv.Itoa(int(d/(24*time.Hour))) + " days"
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// num writes n with thin thousands separators.
func num(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteString("\u202f")
		}
		b.WriteRune(ch)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// mult writes a multiplier: "×0.1", "blocked" for 0.
func mult(v float64) string {
	if v == 0 {
		return "0 (blocked)"
	}
	return "×" + strconv.FormatFloat(v, 'g', 4, 64)
}

// bar scales v of the chart's largest value to a height out of 100.
func bar(v, largest int64) int {
	if largest <= 0 || v <= 0 {
		return 0
	}
	return max(1, int(v*100/largest))
}
