package policy

import (
	"fmt"
	"math"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// nodeBudget bounds how many YAML nodes one parse may visit, aliases
// expanded, so that a small file full of aliases cannot make Parse run (or
// allocate) without end.
const nodeBudget = 2 << 20

// maxMergeDepth bounds nested `<<` merge keys.
const maxMergeDepth = 16

// parser walks a YAML node tree and collects every error it finds.
type parser struct {
	file    string
	baseDir string // directory relative paths resolve against; "" = current
	errs    []*Error
	budget  int
	broke   bool     // budget exhausted (reported once)
	dropped int      // errors found beyond maxCollected
	deep    bool     // merge keys nested too deep (reported once)
	classes []string // the policy's route classes, once routes are parsed
}

// maxCollected bounds the errors one parse keeps in memory.
const maxCollected = 10 * maxErrors

// errorf records an error at n's line.
func (ps *parser) errorf(n *yaml.Node, format string, args ...any) {
	if len(ps.errs) >= maxCollected {
		ps.dropped++
		return
	}
	line := 1
	if n != nil && n.Line > 0 {
		line = n.Line
	}
	msg := fmt.Sprintf(format, args...)
	msg = strings.ReplaceAll(msg, "\n", `\n`)
	ps.errs = append(ps.errs, &Error{File: ps.file, Line: line, Msg: msg})
}

// spend takes k nodes off the budget and reports whether the walk may go on.
func (ps *parser) spend(n *yaml.Node, k int) bool {
	if ps.broke {
		return false
	}
	ps.budget -= k
	if ps.budget < 0 {
		ps.broke = true
		ps.errorf(n, "too many values (aliases expand to more than %d nodes)", nodeBudget)
		return false
	}
	return true
}

// deref follows aliases to the node they stand for.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < 64; i++ {
		n = n.Alias
	}
	return n
}

// isNull reports whether n is an explicit or implicit YAML null.
func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// kindName describes what n is, for "want X, got Y" errors.
func kindName(n *yaml.Node) string {
	switch {
	case n == nil:
		return "nothing"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.ScalarNode && n.Tag == "!!null":
		return "nothing"
	case n.Kind == yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	case n.Kind == yaml.AliasNode:
		return "an alias"
	}
	return "a document"
}

// field is one key/value pair of a mapping; val is dereferenced.
type field struct {
	name string
	key  *yaml.Node
	val  *yaml.Node
}

// mapping is a checked YAML mapping.
type mapping struct {
	node   *yaml.Node
	fields []field // in file order, merged keys last
	index  map[string]int
}

// get returns the field called name.
func (m *mapping) get(name string) (field, bool) {
	if m == nil {
		return field{}, false
	}
	i, ok := m.index[name]
	if !ok {
		return field{}, false
	}
	return m.fields[i], true
}

// mapping checks that n is a mapping of string keys without duplicates and,
// when allowed is not nil, without keys outside allowed. what names the
// mapping in the wrong-kind error. A null n gives an empty mapping. It
// returns nil when n is not a mapping.
func (ps *parser) mapping(n *yaml.Node, what string, allowed []string) *mapping {
	n = deref(n)
	m := &mapping{node: n, index: map[string]int{}}
	if isNull(n) {
		return m
	}
	if n.Kind != yaml.MappingNode {
		ps.errorf(n, "%s: want a mapping, got %s", what, kindName(n))
		return nil
	}
	ps.collect(m, n, allowed, true, 0)
	return m
}

// collect adds the pairs of mapping n to m. Explicit keys (explicit is true
// at the top) must be unique; keys brought in by `<<` merges fill in only
// what is still missing.
func (ps *parser) collect(m *mapping, n *yaml.Node, allowed []string, explicit bool, depth int) {
	if !ps.spend(n, len(n.Content)/2+1) {
		return
	}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if k.Kind != yaml.ScalarNode || isNull(k) {
			ps.errorf(k, "mapping key must be a string, got %s", kindName(k))
			continue
		}
		name := k.Value
		if first, dup := m.index[name]; dup {
			if explicit {
				ps.errorf(k, "duplicate key %q (first at line %d)", name, m.fields[first].key.Line)
			}
			continue
		}
		if allowed != nil && !contains(allowed, name) {
			ps.errorf(k, "unknown field %q (want one of %s)", name, strings.Join(allowed, ", "))
			continue
		}
		m.index[name] = len(m.fields)
		m.fields = append(m.fields, field{name: name, key: k, val: deref(v)})
	}
	for _, v := range merges {
		ps.merge(m, v, allowed, depth+1)
	}
}

// merge applies the value of a `<<` key: a mapping or a list of mappings.
func (ps *parser) merge(m *mapping, v *yaml.Node, allowed []string, depth int) {
	v = deref(v)
	if depth > maxMergeDepth {
		if !ps.deep {
			ps.deep = true
			ps.errorf(v, "merge keys nested more than %d deep (does an alias refer to itself?)", maxMergeDepth)
		}
		return
	}
	switch v.Kind {
	case yaml.MappingNode:
		ps.collect(m, v, allowed, false, depth)
	case yaml.SequenceNode:
		if !ps.spend(v, len(v.Content)) {
			return
		}
		for _, e := range v.Content {
			e = deref(e)
			if e.Kind != yaml.MappingNode {
				ps.errorf(e, "<<: want a mapping, got %s", kindName(e))
				continue
			}
			ps.collect(m, e, allowed, false, depth)
		}
	default:
		ps.errorf(v, "<<: want a mapping or a list of mappings, got %s", kindName(v))
	}
}

// require reports each name missing from m, at m's line.
func (ps *parser) require(m *mapping, what string, names ...string) bool {
	ok := true
	for _, name := range names {
		if _, has := m.index[name]; !has {
			if what != "" {
				ps.errorf(m.node, "%s: missing required field %q", what, name)
			} else {
				ps.errorf(m.node, "missing required field %q", name)
			}
			ok = false
		}
	}
	return ok
}

// list returns the dereferenced elements of the list in f.
func (ps *parser) list(f field) ([]*yaml.Node, bool) {
	if f.val.Kind != yaml.SequenceNode {
		ps.errorf(f.val, "%s: want a list, got %s", f.name, kindName(f.val))
		return nil, false
	}
	if !ps.spend(f.val, len(f.val.Content)) {
		return nil, false
	}
	out := make([]*yaml.Node, len(f.val.Content))
	for i, e := range f.val.Content {
		out[i] = deref(e)
	}
	return out, true
}

// nonEmptyList is list that also refuses an empty list.
func (ps *parser) nonEmptyList(f field) ([]*yaml.Node, bool) {
	l, ok := ps.list(f)
	if ok && len(l) == 0 {
		ps.errorf(f.val, "%s: must not be empty", f.name)
		return nil, false
	}
	return l, ok
}

// scalar returns the text of a non-null scalar node; what names it in errors.
func (ps *parser) scalar(n *yaml.Node, what string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		ps.errorf(n, "%s: want a value, got %s", what, kindName(n))
		return "", false
	}
	if isNull(n) {
		ps.errorf(n, "%s: must not be empty", what)
		return "", false
	}
	return n.Value, true
}

// str returns f's value as a non-empty string.
func (ps *parser) str(f field) (string, bool) {
	s, ok := ps.scalar(f.val, f.name)
	if ok && s == "" {
		ps.errorf(f.val, "%s: must not be empty", f.name)
		return "", false
	}
	return s, ok
}

// boolean returns f's value as a bool (YAML true or false).
func (ps *parser) boolean(f field) (bool, bool) {
	n := f.val
	var b bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&b) != nil {
		ps.errorf(n, "%s: want true or false, got %s", f.name, kindName(n))
		return false, false
	}
	return b, true
}

// number returns f's value as a finite float64.
func (ps *parser) number(f field) (float64, bool) {
	n := f.val
	var x float64
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") || n.Decode(&x) != nil ||
		math.IsInf(x, 0) || math.IsNaN(x) {
		ps.errorf(n, "%s: want a number, got %s", f.name, kindName(n))
		return 0, false
	}
	if Underflows(n.Value, x) {
		// 1e-999 reads as 0: a tightening multiplier would block
		ps.errorf(n, "%s %s: too small for a float64, it would read as 0 (write 0 for 0)", f.name, n.Value)
		return 0, false
	}
	return x, true
}

// integer returns f's value as an int64.
func (ps *parser) integer(f field) (int64, bool) {
	n := f.val
	var x int64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&x) != nil {
		ps.errorf(n, "%s: want an integer, got %s", f.name, kindName(n))
		return 0, false
	}
	return x, true
}

// intRange returns f's value as an int in [lo, hi].
func (ps *parser) intRange(f field, lo, hi int64) (int, bool) {
	x, ok := ps.integer(f)
	if !ok {
		return 0, false
	}
	if x < lo || x > hi {
		ps.errorf(f.val, "%s %d: must be between %d and %d", f.name, x, lo, hi)
		return 0, false
	}
	return int(x), true
}

// fraction returns f's value as a number in [0, 1].
func (ps *parser) fraction(f field) (float64, bool) {
	x, ok := ps.number(f)
	if !ok {
		return 0, false
	}
	if x < 0 || x > 1 {
		ps.errorf(f.val, "%s %s: must be between 0 and 1", f.name, f.val.Value)
		return 0, false
	}
	return x, true
}

// duration returns f's value as a positive duration in Go syntax ("10m").
func (ps *parser) duration(f field) (time.Duration, bool) {
	s, ok := ps.scalar(f.val, f.name)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		ps.errorf(f.val, "%s %q: want a duration like 30s, 10m or 24h", f.name, s)
		return 0, false
	}
	if d <= 0 {
		ps.errorf(f.val, "%s %q: must be positive", f.name, s)
		return 0, false
	}
	return d, true
}

// oneOf returns f's value when it is one of choices.
func (ps *parser) oneOf(f field, choices ...string) (string, bool) {
	s, ok := ps.scalar(f.val, f.name)
	if !ok {
		return "", false
	}
	if !contains(choices, s) {
		ps.errorf(f.val, "%s %q: want %s", f.name, s, orList(choices))
		return "", false
	}
	return s, true
}

// orList writes choices as "a, b or c".
func orList(choices []string) string {
	if len(choices) == 1 {
		return choices[0]
	}
	return strings.Join(choices[:len(choices)-1], ", ") + " or " + choices[len(choices)-1]
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
