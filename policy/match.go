package policy

import (
	"slices"
	"strings"
	"unicode/utf8"
)

// Route returns the class of a request and the route it matched: the first
// route whose method ("*" matches any; otherwise equality ignoring ASCII
// case, and GET matches HEAD too) and path glob match, the path folded as routefold.go says (7.1:
// case, ";" parameters, fragments, backslashes, a format suffix). path is
// the request path without the query string. When no route matches,
// Route returns the index of DefaultClass and nil. It does not allocate
// for a path that needs no folding but case.
func (p *Policy) Route(method, path string) (classIndex int, r *Route) {
	path = FoldRoutePath(path)
	suffix := formatSuffix(path)
	for i := range p.Routes {
		rt := &p.Routes[i]
		if rt.Method != "*" && !methodMatch(rt.Method, method) {
			continue
		}
		if globMatch(rt.Pattern, path) || suffix > 0 && globMatch(rt.Pattern, path[:suffix]) {
			return rt.ClassIndex, rt
		}
	}
	return p.defaultClassIndex(), nil
}

// methodMatch reports whether a route's method matches a request's:
// equal ignoring ASCII case, or a GET route and a HEAD request, which
// Rails and Go's ServeMux serve with the GET handler (7.1). A HEAD route
// before the GET one still takes HEAD apart.
func methodMatch(route, method string) bool {
	return strings.EqualFold(route, method) || strings.EqualFold(route, "GET") && strings.EqualFold(method, "HEAD")
}

// defaultClassIndex returns the index of DefaultClass in p.Classes.
func (p *Policy) defaultClassIndex() int {
	if p.indexed {
		return p.defaultIndex
	}
	return p.ClassIndex(DefaultClass)
}

// globMatch reports whether s matches pattern, where `*` matches any run of
// bytes ('/' included) and every other byte matches itself, ASCII letters
// in either case and also as the non-ASCII letters that case-map to them
// (foldedASCII; 7.1). It keeps a single
// backtrack point (the last star), so it runs in O(len(pattern)*len(s)) time
// and does not allocate.
func globMatch(pattern, s string) bool {
	px, sx := 0, 0
	starPx, starSx := -1, 0
	for px < len(pattern) || sx < len(s) {
		if px < len(pattern) {
			c := pattern[px]
			if c == '*' {
				// Try matching the empty run first; come back here to let
				// the star swallow one more byte.
				starPx, starSx = px, sx
				px++
				continue
			}
			if sx < len(s) && lowerASCII(s[sx]) == lowerASCII(c) {
				px++
				sx++
				continue
			}
			if sx < len(s) && s[sx] >= utf8.RuneSelf {
				if b, n := foldedASCII(s[sx:]); n > 0 && b == lowerASCII(c) {
					px++
					sx += n
					continue
				}
			}
		}
		if starPx >= 0 && starSx < len(s) {
			starSx++
			px, sx = starPx+1, starSx
			continue
		}
		return false
	}
	return true
}

// Applicable returns the limits whose `if` matches a request of the given
// class and authentication state, in file order. The slice is shared: do
// not modify it. For a policy built by Parse, Load or Default it does not
// allocate; an unknown classIndex gives nil.
func (p *Policy) Applicable(classIndex int, authenticated bool) []*Limit {
	if classIndex < 0 || classIndex >= len(p.Classes) {
		return nil
	}
	if p.indexed {
		return p.applicable[classIndex*2+b2i(authenticated)]
	}
	return p.matching(classIndex, authenticated)
}

// matching lists the limits that apply to a class and authentication state.
func (p *Policy) matching(classIndex int, authenticated bool) []*Limit {
	class := p.Classes[classIndex]
	var out []*Limit
	for i := range p.Limits {
		l := &p.Limits[i]
		if l.IfAuthenticated != nil && *l.IfAuthenticated != authenticated {
			continue
		}
		if len(l.IfClasses) > 0 && !contains(l.IfClasses, class) {
			continue
		}
		out = append(out, l)
	}
	return out
}

// ReadsAccount reports whether requests of class classIndex name their
// account for the reverse proxy to find in the body or a header
// (`identity.account_body_field`, `account_header`): class auth, and every
// class that a limit keyed by account names in its `if: {class}` or an
// account lockout or step-up rule names in its `classes`. Without it a
// per-account limit on an OTP route was never decided in proxy mode
// (TestAttackOTPGuessesUnlimitedPerAccount). A limit keyed by account
// without `if: {class}` does not make every route read bodies: it binds
// on the classes above.
func (p *Policy) ReadsAccount(classIndex int) bool {
	if classIndex < 0 || classIndex >= len(p.Classes) {
		return false
	}
	if p.indexed {
		return p.readsAccount[classIndex]
	}
	return p.needsAccount(classIndex)
}

// needsAccount computes ReadsAccount.
func (p *Policy) needsAccount(classIndex int) bool {
	class := p.Classes[classIndex]
	if class == LockClass {
		return true
	}
	for i := range p.Limits {
		if l := &p.Limits[i]; slices.Contains(l.By, PartAccount) && contains(l.IfClasses, class) {
			return true
		}
	}
	return slices.Contains(p.LockParts(classIndex), PartAccount)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ClassIndex returns the index of the class called name in p.Classes, or -1.
func (p *Policy) ClassIndex(name string) int {
	return indexOf(p.Classes, name)
}

// FailureModeOf returns what limit l does, for a request of the given class,
// when its store cannot be reached: l's own failure_mode if it sets one,
// else failure_mode[class], else failure_mode.default, else FailOpen.
func (p *Policy) FailureModeOf(l *Limit, classIndex int) FailureMode {
	if l != nil && l.FailureMode != nil {
		return *l.FailureMode
	}
	if classIndex >= 0 && classIndex < len(p.Classes) {
		if p.indexed {
			return p.classFailure[classIndex]
		}
		if m, ok := p.FailureByClass[p.Classes[classIndex]]; ok {
			return m
		}
	}
	return p.FailureDefault
}

// LimitByName returns the limit called name, or nil.
func (p *Policy) LimitByName(name string) *Limit {
	if p.indexed {
		return p.byName[name]
	}
	for i := range p.Limits {
		if p.Limits[i].Name == name {
			return &p.Limits[i]
		}
	}
	return nil
}

// PerSecond returns the limit's refill rate in tokens per second.
func (l *Limit) PerSecond() float64 {
	if l.Period <= 0 {
		return 0
	}
	return l.Rate / l.Period.Seconds()
}

// index precomputes the lookups Route, Applicable, FailureModeOf and
// LimitByName use. Parse calls it once; the policy is read-only afterwards.
func (p *Policy) index() {
	p.defaultIndex = p.ClassIndex(DefaultClass)
	p.applicable = make([][]*Limit, 2*len(p.Classes))
	p.classFailure = make([]FailureMode, len(p.Classes))
	p.readsAccount = make([]bool, len(p.Classes))
	for c, name := range p.Classes {
		p.readsAccount[c] = p.needsAccount(c)
		p.applicable[2*c] = p.matching(c, false)
		p.applicable[2*c+1] = p.matching(c, true)
		mode, ok := p.FailureByClass[name]
		if !ok {
			mode = p.FailureDefault
		}
		p.classFailure[c] = mode
	}
	p.byName = make(map[string]*Limit, len(p.Limits))
	for i := range p.Limits {
		p.byName[p.Limits[i].Name] = &p.Limits[i]
	}
	p.indexed = true
}
