package policy

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Limits on what a policy may say.
const (
	// MaxRate is the largest N of a `rate: N/period` (and the largest burst).
	MaxRate  = 1e9
	maxName  = 64 // limit and velocity rule names
	maxClass = 32
)

// The keys each mapping of the file may have.
var (
	topFields      = []string{"version", "identity", "routes", "limits", "failure_mode", "risk", "lists", "allow", "deny", "envoy", "alerting"}
	identityFields = []string{"trusted_proxies", "user_header", "user_signature_header", "user_signature_key_env", "user_signature_max_age", "user_signature_require_timestamp", "ipv6_prefix", "device_header", "device_token_header", "account_body_field", "account_header", "account_response_header", "attributes"}
	routeFields    = []string{"match", "class"}
	limitFields    = []string{"name", "by", "rate", "burst", "quota", "concurrency", "lease_ttl", "shadow", "failure_mode", "if", "trusted_devices", "local_share"}
	ifFields       = []string{"authenticated", "class", "attr"}
	failureModes   = []string{"open", "closed"}
	keyPartNames   = []string{"global", "ip", "user", "device", "account", "asn", "route"}
)

// Load reads and parses the policy file at path. Errors in the file are
// reported as "PATH:LINE: ..." with path as given; relative file names
// inside the policy resolve against the policy file's directory.
func Load(path string) (*Policy, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return parse(path, filepath.Dir(path), data)
}

// readFile reads at most MaxFileSize bytes of path, refusing larger files.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("policy: read config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("policy: read config %q: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, tooLarge(path)
	}
	return data, nil
}

func tooLarge(name string) error {
	return oneError(&Error{File: name, Line: 1,
		Msg: fmt.Sprintf("file too large (more than %d bytes)", MaxFileSize), Err: ErrTooLarge})
}

// Parse parses and validates a policy file held in memory. name is used in
// errors ("NAME:LINE: ...") and as Policy.Source; relative file names inside
// the policy resolve against the current directory.
//
// On failure Parse returns a nil Policy and every problem it found, each an
// *Error, joined with errors.Join and sorted by line.
func Parse(name string, data []byte) (*Policy, error) {
	return parse(name, "", data)
}

func parse(name, baseDir string, data []byte) (p *Policy, err error) {
	if len(data) > MaxFileSize {
		return nil, tooLarge(name)
	}
	defer func() {
		// The YAML library is fuzzed and should not panic; should it still, a
		// bad file must not take the process down.
		if r := recover(); r != nil {
			p, err = nil, oneError(&Error{File: name, Line: 1,
				Msg: fmt.Sprintf("invalid YAML: %v", r)})
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, oneError(&Error{File: name, Line: 1,
				Msg: "file is empty: want a mapping with at least version and limits"})
		}
		return nil, oneError(syntaxError(name, data, err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, oneError(&Error{File: name, Line: max(extra.Line, 1),
			Msg: "only one YAML document is allowed (found a second one)"})
	} else if !errors.Is(err, io.EOF) {
		return nil, oneError(syntaxError(name, data, err))
	}

	ps := &parser{file: name, baseDir: baseDir, budget: nodeBudget}
	p = ps.policy(&doc)
	if err := joinErrors(ps.errs, ps.dropped); err != nil {
		return nil, err
	}
	p.Source = name
	p.sum = sha256.Sum256(data)
	p.index()
	return p, nil
}

// policy walks the document.
func (ps *parser) policy(doc *yaml.Node) *Policy {
	p := &Policy{}
	top := ps.top(doc)
	if top == nil {
		return p
	}

	if f, ok := top.get("version"); ok {
		if v, ok := ps.integer(f); ok {
			if v != 1 {
				ps.errorf(f.val, "version %d: unsupported (want 1)", v)
			}
			p.Version = int(v)
		}
	}
	if f, ok := top.get("identity"); ok {
		p.Identity = ps.identity(f)
	}
	if p.Identity.DeviceTokenHeader == "" {
		p.Identity.DeviceTokenHeader = DefaultDeviceTokenHeader
	}

	// Routes first: limits and failure_mode name their classes.
	classes := []string{}
	if f, ok := top.get("routes"); ok && !isNull(f.val) {
		p.Routes, classes = ps.routes(f)
	}
	if !contains(classes, DefaultClass) {
		classes = append(classes, DefaultClass)
	}
	p.Classes = classes
	ps.classes = classes

	if f, ok := top.get("limits"); ok {
		p.Limits = ps.limits(f, classes)
		ps.checkApplicable(p)
	}
	if f, ok := top.get("failure_mode"); ok {
		p.FailureDefault, p.FailureByClass = ps.failureModes(f, classes)
	}
	if f, ok := top.get("risk"); ok {
		p.Risk = ps.risk(f)
	}
	if f, ok := top.get("envoy"); ok && !isNull(f.val) {
		p.Envoy = ps.envoy(f)
	}
	if f, ok := top.get("alerting"); ok && !isNull(f.val) {
		p.Alerting = ps.alerting(f)
	}
	ps.allowDeny(top, p)
	return p
}

// top returns the document's top-level mapping, nil (with the error) when
// it is not one.
func (ps *parser) top(doc *yaml.Node) *mapping {
	root := doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	root = deref(root)
	if root.Kind != yaml.MappingNode {
		ps.errorf(root, "want a mapping with at least version and limits at the top, got %s", kindName(root))
		return nil
	}
	top := ps.mapping(root, "policy", topFields)
	if top != nil {
		ps.require(top, "", "version", "limits")
	}
	return top
}

// allowDeny reads lists, allow and deny into p: allow and deny name lists
// the lists section defines.
func (ps *parser) allowDeny(top *mapping, p *Policy) {
	var listNames []string
	if f, ok := top.get("lists"); ok {
		p.Lists, listNames = ps.lists(f)
	}
	if f, ok := top.get("allow"); ok {
		p.Allow = ps.listNames(f, p.Lists, listNames)
	}
	if f, ok := top.get("deny"); ok {
		p.Deny = ps.listNames(f, p.Lists, listNames)
	}
}

// identity parses the `identity` section.
func (ps *parser) identity(f field) Identity {
	var id Identity
	m := ps.mapping(f.val, f.name, identityFields)
	if m == nil {
		return id
	}
	for _, g := range m.fields {
		switch g.name {
		case "trusted_proxies":
			if isNull(g.val) {
				continue
			}
			if l, ok := ps.list(g); ok {
				id.TrustedProxies, _ = ps.prefixes(g, l)
			}
		case "user_header", "user_signature_header", "device_header", "device_token_header", "account_header", "account_response_header":
			ps.identityHeader(g, &id)
		case "user_signature_key_env", "user_signature_max_age", "user_signature_require_timestamp":
			ps.userSignature(g, &id)
		case "ipv6_prefix":
			id.IPv6Prefix, _ = ps.intRange(g, 32, 128)
		case "account_body_field":
			id.AccountBodyFields = ps.accountFields(g)
			if len(id.AccountBodyFields) > 0 {
				id.AccountBodyField = id.AccountBodyFields[0]
			}
		case "attributes":
			id.Attributes = ps.attributeHeaders(g)
		}
	}
	ps.checkUserSignature(m, &id)
	return id
}

// MaxAccountFields bounds the body fields that may name the account.
const MaxAccountFields = 8

// accountFields reads account_body_field: a field name, or a list of at
// most MaxAccountFields distinct ones (a login that takes a username or
// an email names the account by either).
func (ps *parser) accountFields(g field) []string {
	if g.val.Kind != yaml.SequenceNode {
		if s, ok := ps.str(g); ok {
			return []string{s}
		}
		return nil
	}
	l, ok := ps.nonEmptyList(g)
	if !ok {
		return nil
	}
	if len(l) > MaxAccountFields {
		ps.errorf(g.val, "%s: at most %d fields, got %d", g.name, MaxAccountFields, len(l))
		return nil
	}
	var out []string
	for _, n := range l {
		s, ok := ps.scalar(n, g.name)
		switch {
		case !ok:
			return nil
		case s == "":
			ps.errorf(n, "%s: must not be empty", g.name)
			return nil
		case slices.ContainsFunc(out, func(o string) bool { return strings.EqualFold(o, s) }):
			ps.errorf(n, "%s: %q is listed twice (fields match ignoring case)", g.name, s)
			return nil
		}
		out = append(out, s)
	}
	return out
}

// identityHeader sets the header of id that g names (user_header,
// user_signature_header, device_header, device_token_header,
// account_header, account_response_header): a valid HTTP header name.
func (ps *parser) identityHeader(g field, id *Identity) {
	s, ok := ps.str(g)
	if !ok {
		return
	}
	if !isToken(s) {
		ps.errorf(g.val, "%s %q: not a valid HTTP header name", g.name, s)
		return
	}
	switch g.name {
	case "user_header":
		id.UserHeader = s
	case "user_signature_header":
		id.UserSignatureHeader = s
	case "account_header":
		id.AccountHeader = s
	case "account_response_header":
		id.AccountResponseHeader = s
	case "device_token_header":
		id.DeviceTokenHeader = s
	default:
		id.DeviceHeader = s
	}
}

// parsePrefixOrAddr parses a CIDR prefix (masked) or a bare address (a /32
// or /128).
func parsePrefixOrAddr(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, errors.New("not a CIDR prefix or IP address")
		}
		return pfx.Masked(), nil
	}
	addr, err := netip.ParseAddr(s)
	if err != nil || addr.Zone() != "" {
		return netip.Prefix{}, errors.New("not a CIDR prefix or IP address")
	}
	return netip.PrefixFrom(addr, addr.BitLen()), nil
}

// envName returns f's value when it is a valid environment variable name.
func (ps *parser) envName(f field) (string, bool) {
	s, ok := ps.str(f)
	if !ok {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || i > 0 && '0' <= c && c <= '9' {
			continue
		}
		ps.errorf(f.val, "%s %q: not a valid environment variable name", f.name, s)
		return "", false
	}
	return s, true
}

// routes parses `routes` and returns them with their classes in order of
// first appearance.
func (ps *parser) routes(f field) ([]Route, []string) {
	l, ok := ps.list(f)
	if !ok {
		return nil, nil
	}
	var routes []Route
	var classes []string
	for _, n := range l {
		m := ps.mapping(n, "routes entry", routeFields)
		if m == nil {
			continue
		}
		if !ps.require(m, "route", "match", "class") {
			continue
		}
		r := Route{Line: n.Line}
		ok := true
		g, _ := m.get("match")
		if s, good := ps.str(g); !good {
			ok = false
		} else if r.Method, r.Pattern, good = ps.routeMatch(g, s); !good {
			ok = false
		} else {
			r.Match = r.Method + " " + r.Pattern
		}
		g, _ = m.get("class")
		if s, good := ps.str(g); !good {
			ok = false
		} else if !validClass(s) {
			ps.errorf(g.val, "class %q: want 1-%d characters of a-z 0-9 _ -", s, maxClass)
			ok = false
		} else {
			r.Class = s
		}
		if !ok {
			continue
		}
		r.ClassIndex = indexOf(classes, r.Class)
		if r.ClassIndex < 0 {
			r.ClassIndex = len(classes)
			classes = append(classes, r.Class)
		}
		routes = append(routes, r)
	}
	return routes, classes
}

// routeMatch splits and checks "METHOD PATH" and returns the path folded
// as FoldRoutePath folds request paths.
func (ps *parser) routeMatch(g field, s string) (method, pattern string, ok bool) {
	parts := strings.Fields(s)
	if len(parts) != 2 {
		ps.errorf(g.val, "match %q: want \"METHOD /path\" (METHOD may be *, the path a glob with *)", s)
		return "", "", false
	}
	method, pattern = parts[0], parts[1]
	if !isToken(method) {
		ps.errorf(g.val, "match %q: method %q is not an HTTP method token", s, method)
		return "", "", false
	}
	if pattern != "*" && !strings.HasPrefix(pattern, "/") {
		ps.errorf(g.val, "match %q: path %q must start with / (or be *)", s, pattern)
		return "", "", false
	}
	for i := 0; i < len(pattern); i++ {
		if c := pattern[i]; c < 0x21 || c == 0x7f {
			ps.errorf(g.val, "match %q: path has a control character", s)
			return "", "", false
		}
	}
	if pattern == "*" {
		return method, pattern, true
	}
	// Requests are matched on their folded path, so a pattern is folded
	// the same way, or a trailing slash, "//" or "/./" in it would never
	// match. Folding that drops a * (a ";" or "#" before it, a ".." after
	// it) would change what the glob means: refused.
	folded := FoldRoutePath(pattern)
	if strings.Count(folded, "*") != strings.Count(pattern, "*") {
		ps.errorf(g.val, "match %q: path folds to %q, which drops a *; write the path requests are matched as", s, folded)
		return "", "", false
	}
	return method, folded, true
}

// limits parses `limits`.
func (ps *parser) limits(f field, classes []string) []Limit {
	if isNull(f.val) {
		ps.errorf(f.val, "limits: must not be empty")
		return nil
	}
	l, ok := ps.nonEmptyList(f)
	if !ok {
		return nil
	}
	var limits []Limit
	seen := map[string]int{} // name -> line
	for _, n := range l {
		lim, ok := ps.limit(n, classes, seen)
		if ok {
			lim.Index = len(limits)
			limits = append(limits, lim)
		}
	}
	return limits
}

// checkApplicable refuses, at the limit past the cap, a policy where more
// than MaxApplicable limits can apply to one request of some class and
// authentication state. A limit's attribute conditions are taken as "may
// apply". Each limit is reported once.
func (ps *parser) checkApplicable(p *Policy) {
	reported := map[int]bool{}
	for c, class := range p.Classes {
		for _, authenticated := range []bool{false, true} {
			l := p.matching(c, authenticated)
			if len(l) <= MaxApplicable || reported[l[MaxApplicable].Index] {
				continue
			}
			over := l[MaxApplicable]
			reported[over.Index] = true
			state := "not authenticated"
			if authenticated {
				state = "authenticated"
			}
			ps.errorf(&yaml.Node{Line: over.Line}, "limit %q: more than %d limits (the most one request may be checked against) can apply to a request of class %s, %s",
				over.Name, MaxApplicable, class, state)
		}
	}
}

// limit parses one entry of `limits`.
func (ps *parser) limit(n *yaml.Node, classes []string, seen map[string]int) (Limit, bool) {
	lim := Limit{Line: n.Line}
	m := ps.mapping(n, "limits entry", limitFields)
	if m == nil {
		return lim, false
	}
	ok := ps.require(m, "limit", "name", "by")
	ok = ps.checkKind(m, &lim) && ok
	burstSet := false
	for _, g := range m.fields {
		switch g.name {
		case "name":
			var good bool
			lim.Name, good = ps.uniqueName(g, "limit", seen)
			if good && lim.Name == AttestationLimitName {
				ps.errorf(g.val, "name %q: reserved for the limit of risk.attestation.max_per_ip", lim.Name)
				good = false
			}
			ok = ok && good
		case "by":
			by, attrs, good := ps.keyParts(g)
			ok = ok && good
			lim.By, lim.ByAttr = by, attrs
		case "rate":
			ok = ps.limitRate(g, &lim) && ok
		case "burst":
			good := ps.limitBurst(g, &lim)
			ok, burstSet = ok && good, burstSet || good
		case "shadow":
			b, good := ps.boolean(g)
			ok = ok && good
			lim.Shadow = b
		case "failure_mode":
			mode, good := ps.failureMode(g)
			if good {
				lim.FailureMode = &mode
			}
			ok = ok && good
		case "if":
			ok = ps.limitIf(g, classes, &lim) && ok
		case "quota", "concurrency", "lease_ttl":
			ok = ps.limitKind(g, &lim) && ok
		case "trusted_devices":
			mode, good := ps.oneOf(g, "own", "shared")
			lim.TrustedOwn, ok = mode == "own", ok && good
		case "local_share":
			ok = ps.localShare(g, &lim) && ok
		}
	}
	if !burstSet && lim.Kind == KindBucket {
		lim.Burst = max(lim.Rate, 1)
	}
	return lim, ok && ps.checkLimit(m, &lim)
}

// uniqueName reads the name of a what ("limit", "velocity rule") from g:
// a valid name not used by an earlier one (seen maps names to the lines
// that gave them). A duplicate is returned with false.
func (ps *parser) uniqueName(g field, what string, seen map[string]int) (string, bool) {
	s, good := ps.str(g)
	switch {
	case !good:
		return "", false
	case !validName(s):
		ps.errorf(g.val, "name %q: want 1-%d characters of A-Z a-z 0-9 _ . -", s, maxName)
		return "", false
	}
	if first, dup := seen[s]; dup {
		ps.errorf(g.val, "duplicate %s name %q (first at line %d)", what, s, first)
		return s, false
	}
	seen[s] = g.val.Line
	return s, true
}

// limitRate sets lim's rate and period from g ("100/s", "5/min", ...).
func (ps *parser) limitRate(g field, lim *Limit) bool {
	s, good := ps.scalar(g.val, g.name)
	if !good {
		return false
	}
	n, period, err := parseRate(s)
	if err != nil {
		ps.errorf(g.val, "rate %q: %v", s, err)
		return false
	}
	lim.Rate, lim.Period, lim.RateText = n, period, s
	return true
}

// limitBurst sets lim's burst from g: 1 to MaxRate tokens.
func (ps *parser) limitBurst(g field, lim *Limit) bool {
	x, good := ps.number(g)
	switch {
	case !good:
		return false
	case x < 1:
		ps.errorf(g.val, "burst %s: must be at least 1 (a smaller bucket never holds a whole request)", g.val.Value)
		return false
	case x > MaxRate:
		ps.errorf(g.val, "burst %s: must be at most %g", g.val.Value, MaxRate)
		return false
	}
	lim.Burst = x
	return true
}

// checkLimit checks what a limit's fields say together, once each is
// valid on its own.
func (ps *parser) checkLimit(m *mapping, lim *Limit) bool {
	ok := true
	if lim.IfAuthenticated != nil && !*lim.IfAuthenticated {
		for _, part := range lim.By {
			if part == PartUser {
				g, _ := m.get("by")
				ps.errorf(g.val, "by user: never present on unauthenticated requests, and this limit has if.authenticated: false")
				ok = false
			}
		}
	}
	if fill := lim.Burst / lim.Rate * lim.Period.Hours(); lim.Kind == KindBucket && lim.Rate > 0 && fill > maxFill.Hours() {
		g, found := m.get("rate")
		if !found {
			g, _ = m.get("burst")
		}
		ps.errorf(g.val, "rate %s with burst %g: an empty bucket would take %.3g years to fill, more than %d (its key could outlive any expiry Redis accepts); raise the rate or lower the burst",
			lim.RateText, lim.Burst, fill/(24*365), int(maxFill.Hours()/(24*365)))
		ok = false
	}
	return ps.checkShare(m, lim) && ok
}

// maxFill is the longest a bucket may take to fill from empty: a key's
// expiry is when it would be full, and one far enough out (0.001/day
// with a burst of 10^9: 10^12 days) overflows the PX Redis accepts,
// failing every decision of the batch.
const maxFill = 100 * 365 * 24 * time.Hour

// keyParts parses a limit's `by`: the parts and, when one is an
// attribute, the attribute names parallel to them.
func (ps *parser) keyParts(g field) ([]KeyPart, []string, bool) {
	l, ok := ps.nonEmptyList(g)
	if !ok {
		return nil, nil, false
	}
	var parts []KeyPart
	var names []string // attribute names, parallel to parts
	for _, n := range l {
		s, good := ps.scalar(n, "by")
		if !good {
			ok = false
			continue
		}
		part, known := keyPartOf(s)
		name := ""
		if attr, isAttr := strings.CutPrefix(s, "attr:"); isAttr {
			if !ValidAttrName(attr) {
				ps.errorf(n, "by %q: attribute name %q: want 1-%d characters of a-z 0-9 _", s, attr, MaxAttrName)
				ok = false
				continue
			}
			part, name = PartAttr, attr
		} else if !known {
			ps.errorf(n, "by %q: want %s", s, orList(append(keyPartNames[:len(keyPartNames):len(keyPartNames)], "attr:NAME")))
			ok = false
			continue
		}
		if (part != PartAttr && indexOfPart(parts, part) >= 0) || (part == PartAttr && contains(names, name)) {
			ps.errorf(n, "by: %q listed twice", s)
			ok = false
			continue
		}
		parts, names = append(parts, part), append(names, name)
	}
	if ok && len(parts) > 1 && indexOfPart(parts, PartGlobal) >= 0 {
		ps.errorf(g.val, "by: global cannot be combined with other key parts")
		ok = false
	}
	if indexOfPart(parts, PartAttr) < 0 {
		names = nil
	}
	return parts, names, ok
}

// limitIf parses a limit's `if`.
func (ps *parser) limitIf(g field, classes []string, lim *Limit) bool {
	m := ps.mapping(g.val, "if", ifFields)
	if m == nil {
		return false
	}
	ok := true
	if h, has := m.get("authenticated"); has {
		b, good := ps.boolean(h)
		if good {
			lim.IfAuthenticated = &b
		}
		ok = good
	}
	if h, has := m.get("class"); has {
		var nodes []*yaml.Node
		if h.val.Kind == yaml.SequenceNode {
			l, good := ps.nonEmptyList(h)
			if !good {
				return false
			}
			nodes = l
		} else {
			nodes = []*yaml.Node{h.val}
		}
		for _, n := range nodes {
			s, good := ps.scalar(n, "class")
			if !good {
				ok = false
				continue
			}
			if !contains(classes, s) {
				ps.errorf(n, "unknown class %q (classes: %s)", s, strings.Join(classes, ", "))
				ok = false
				continue
			}
			if !contains(lim.IfClasses, s) {
				lim.IfClasses = append(lim.IfClasses, s)
			}
		}
	}
	if h, has := m.get("attr"); has {
		conds, good := ps.attrConditions(h)
		lim.IfAttr = conds
		ok = ok && good
	}
	return ok
}

// failureMode parses "open" or "closed".
func (ps *parser) failureMode(g field) (FailureMode, bool) {
	s, ok := ps.oneOf(g, failureModes...)
	if s == "closed" {
		return FailClosed, ok
	}
	return FailOpen, ok
}

// failureModes parses the top-level `failure_mode`.
func (ps *parser) failureModes(f field, classes []string) (FailureMode, map[string]FailureMode) {
	m := ps.mapping(f.val, f.name, nil)
	if m == nil {
		return FailOpen, nil
	}
	def := FailOpen
	var byClass map[string]FailureMode
	for _, g := range m.fields {
		if g.name != DefaultClass && !contains(classes, g.name) {
			ps.errorf(g.key, "failure_mode: unknown class %q (classes: %s)", g.name, strings.Join(classes, ", "))
			continue
		}
		mode, ok := ps.failureMode(g)
		if !ok {
			continue
		}
		if g.name == DefaultClass {
			def = mode
			continue
		}
		if byClass == nil {
			byClass = map[string]FailureMode{}
		}
		byClass[g.name] = mode
	}
	return def, byClass
}

// rateUnits maps the unit of `N/unit` to its period.
var rateUnits = map[string]time.Duration{
	"s": time.Second, "sec": time.Second, "second": time.Second,
	"min": time.Minute, "minute": time.Minute,
	"h": time.Hour, "hour": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour,
}

// errRateSyntax is the error for a rate that is not N/unit.
var errRateSyntax = errors.New("want N/s, N/min, N/h or N/day (N a positive number)")

// parseRate parses "N/s", "N/min", "N/h", "N/day" (and the other unit names).
func parseRate(s string) (float64, time.Duration, error) {
	num, unit, found := strings.Cut(s, "/")
	period, known := rateUnits[unit]
	if !found || !known || !isDecimal(num) {
		return 0, 0, errRateSyntax
	}
	n, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, 0, errRateSyntax
	}
	if n <= 0 {
		return 0, 0, errors.New("N must be positive")
	}
	if n > MaxRate {
		return 0, 0, fmt.Errorf("N must be at most %g", MaxRate)
	}
	return n, period, nil
}

// isDecimal reports whether s is digits with an optional fraction ("12", "0.5").
func isDecimal(s string) bool {
	intPart, frac, hasFrac := strings.Cut(s, ".")
	return allDigits(intPart) && (!hasFrac || allDigits(frac))
}

func allDigits(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// keyPartOf maps a `by` word to its KeyPart (attributes are parsed by
// keyParts).
func keyPartOf(s string) (KeyPart, bool) {
	for i, name := range keyPartNames {
		if name == s {
			return KeyPart(i + 1), true
		}
	}
	return 0, false
}

func indexOfPart(parts []KeyPart, p KeyPart) int {
	for i, x := range parts {
		if x == p {
			return i
		}
	}
	return -1
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// validName reports whether s is a valid limit or rule name.
func validName(s string) bool {
	if len(s) == 0 || len(s) > maxName {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// validClass reports whether s is a valid class name.
func validClass(s string) bool {
	if len(s) == 0 || len(s) > maxClass {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// isToken reports whether s is an HTTP token (RFC 9110 section 5.6.2).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// existingFile checks that the file named by f exists and returns its path, resolved
// against the policy file's directory when relative.
func (ps *parser) existingFile(f field) (string, bool) {
	s, ok := ps.str(f)
	if !ok {
		return "", false
	}
	path := s
	if !filepath.IsAbs(path) && ps.baseDir != "" {
		path = filepath.Join(ps.baseDir, path)
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		ps.errorf(f.val, "%s %q: no such file", f.name, s)
		return "", false
	case err != nil:
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		ps.errorf(f.val, "%s %q: %v", f.name, s, err)
		return "", false
	case fi.IsDir():
		ps.errorf(f.val, "%s %q: is a directory", f.name, s)
		return "", false
	}
	return path, true
}
