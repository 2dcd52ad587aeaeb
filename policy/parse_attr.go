package policy

import (
	"path/filepath"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

var listFields = []string{"file", "kind"}

// attributeHeaders parses `identity.attributes`: attribute name -> header.
func (ps *parser) attributeHeaders(f field) []AttributeHeader {
	m := ps.mapping(f.val, f.name, nil)
	if m == nil {
		return nil
	}
	var out []AttributeHeader
	for _, g := range m.fields {
		if !ValidAttrName(g.name) {
			ps.errorf(g.key, "attributes: attribute name %q: want 1-%d characters of a-z 0-9 _", g.name, MaxAttrName)
			continue
		}
		h, ok := ps.str(g)
		if !ok {
			continue
		}
		if !isToken(h) {
			ps.errorf(g.val, "attributes: %s: %q is not a valid HTTP header name", g.name, h)
			continue
		}
		out = append(out, AttributeHeader{Name: g.name, Header: h})
	}
	if len(out) > MaxAttributes {
		ps.errorf(f.val, "attributes: %d entries, at most %d", len(out), MaxAttributes)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// attrConditions parses a limit's `if.attr`: attribute name -> a value or
// a list of values.
func (ps *parser) attrConditions(f field) ([]AttrCondition, bool) {
	m := ps.mapping(f.val, "if.attr", nil)
	if m == nil {
		return nil, false
	}
	if len(m.fields) == 0 {
		ps.errorf(f.val, "attr: must not be empty")
		return nil, false
	}
	ok := true
	var out []AttrCondition
	for _, g := range m.fields {
		if !ValidAttrName(g.name) {
			ps.errorf(g.key, "attr: attribute name %q: want 1-%d characters of a-z 0-9 _", g.name, MaxAttrName)
			ok = false
			continue
		}
		nodes := []*yaml.Node{g.val}
		if g.val.Kind == yaml.SequenceNode {
			l, good := ps.nonEmptyList(g)
			if !good {
				ok = false
				continue
			}
			nodes = l
		}
		c := AttrCondition{Name: g.name}
		for _, n := range nodes {
			v, good := ps.scalar(n, "attr "+g.name)
			if good {
				if msg := CheckAttribute(g.name, v); msg != "" {
					ps.errorf(n, "attr %s: value %q %s", g.name, clipText(v), msg)
					good = false
				}
			}
			if !good {
				ok = false
				continue
			}
			if !contains(c.Values, v) {
				c.Values = append(c.Values, v)
			}
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, ok
}

// lists parses `lists`: NAME -> {file, kind}, loading each file. It
// returns the good lists and the names of all.
func (ps *parser) lists(f field) ([]*List, []string) {
	m := ps.mapping(f.val, f.name, nil)
	if m == nil {
		return nil, nil
	}
	var out []*List
	var names []string
	for _, g := range m.fields {
		names = append(names, g.name)
		if !validName(g.name) {
			ps.errorf(g.key, "lists: name %q: want 1-%d characters of A-Z a-z 0-9 _ . -", g.name, maxName)
			continue
		}
		lm := ps.mapping(g.val, "lists."+g.name, listFields)
		if lm == nil || !ps.require(lm, "list "+g.name, "file", "kind") {
			continue
		}
		l := &List{Name: g.name, Line: g.key.Line}
		kf, _ := lm.get("kind")
		s, ok := ps.str(kf)
		if !ok {
			continue
		}
		kind, attr, err := parseListKind(s)
		if err != nil {
			ps.errorf(kf.val, "kind %q: %v", s, err)
			continue
		}
		l.Kind, l.Attr = kind, attr
		ff, _ := lm.get("file")
		path, ok := ps.existingFile(ff)
		if !ok {
			continue
		}
		l.File = path
		set, sum, err := readList(path, kind)
		if err != nil {
			ps.listError(ff, path, err)
			continue
		}
		l.set.Store(set)
		l.seen.sum = sum
		out = append(out, l)
	}
	return out, names
}

// listError records the errors of reading or parsing a list file: its
// own FILE:LINE errors as they are, others at the `file` line.
func (ps *parser) listError(f field, path string, err error) {
	var found bool
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			if pe, ok := e.(*Error); ok {
				found = true
				if len(ps.errs) < maxCollected {
					ps.errs = append(ps.errs, pe)
				} else {
					ps.dropped++
				}
			}
		}
	}
	if !found {
		ps.errorf(f.val, "file %q: %v", filepath.Base(path), err)
	}
}

// listNames parses `allow` or `deny`: names of lists.
// names are all the names under `lists` (a list that failed to load is
// not reported again).
func (ps *parser) listNames(f field, lists []*List, names []string) []*List {
	if isNull(f.val) {
		return nil
	}
	nodes, ok := ps.list(f)
	if !ok {
		return nil
	}
	var out []*List
	for _, n := range nodes {
		s, ok := ps.scalar(n, f.name)
		if !ok {
			continue
		}
		var l *List
		for _, x := range lists {
			if x.Name == s {
				l = x
			}
		}
		if l == nil && contains(names, s) {
			continue
		}
		if l == nil {
			ps.errorf(n, "%s: unknown list %q (lists: %s)", f.name, s, strings.Join(names, ", "))
			continue
		}
		if !containsList(out, l) {
			out = append(out, l)
		}
	}
	return out
}

func containsList(ls []*List, l *List) bool {
	for _, x := range ls {
		if x == l {
			return true
		}
	}
	return false
}
