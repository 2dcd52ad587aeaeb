package policy

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"
)

// Bounds on list files.
const (
	// MaxListFileSize is the largest list file accepted, in bytes.
	MaxListFileSize = 64 << 20
	// MaxListEntries is the most entries one list may hold.
	MaxListEntries = 1_000_000
	// MaxListValue bounds an entry of an account, user, device or
	// attribute list, in bytes.
	MaxListValue = 256
)

// ListKind is what a list's entries are matched against.
type ListKind uint8

// List kinds, as written in `kind`.
const (
	ListIP ListKind = iota + 1
	ListASN
	ListAccount
	ListUser
	ListDevice
	ListAttr // `attr:NAME`; the name is List.Attr
)

// listKindNames are the kinds as written, indexed by ListKind-1.
var listKindNames = []string{"ip", "asn", "account", "user", "device"}

// String returns the kind as written ("attr" for attribute lists).
func (k ListKind) String() string {
	if k >= ListIP && int(k) <= len(listKindNames) {
		return listKindNames[k-1]
	}
	if k == ListAttr {
		return "attr"
	}
	return "unknown"
}

// List is one entry of `lists`: a named set of entries read from a file.
// The entries are replaced when the file changes (Holder.CheckListsOnce);
// Set returns those in force. A List is safe for concurrent use.
type List struct {
	// Name is the list's name (the key under `lists`).
	Name string
	// Kind is what entries match; Attr the attribute's name for ListAttr.
	Kind ListKind
	Attr string
	// File is the list file's path, resolved against the policy file's
	// directory.
	File string
	// Line is the line of the list in the policy file.
	Line int

	set atomic.Pointer[ListSet]
	// The file version last loaded (or refused); guarded by Holder.mu.
	seen    fileStamp
	known   bool
	missing bool // the file could not be read at the last check
	// pending is the changed file's stamp at the last check: it is read
	// when the next check finds the same.
	pending    fileStamp
	pendingSet bool
}

// KindText returns the list's kind as written ("ip", "attr:plan").
func (l *List) KindText() string {
	if l.Kind == ListAttr {
		return "attr:" + l.Attr
	}
	return l.Kind.String()
}

// Set returns the entries in force.
func (l *List) Set() *ListSet { return l.set.Load() }

// ListQuery is what a list can match in a request. Addr is the client
// address (unmapped); Account is normalised when matched. DeviceProven
// is true when the request presented a valid device token for DeviceID
// (6.3); without one the id is only claimed.
type ListQuery struct {
	Addr                           netip.Addr
	ASN, UserID, DeviceID, Account string
	DeviceProven                   bool
	Attributes                     map[string]string
}

// Matches reports whether the request q is on l. A device list, allow or
// deny, matches only a proven device id (q.DeviceProven, 7.1): an entry
// names a device proven by its token, and a bare id is anyone's claim.
// It does not allocate when q.Account is already normalised.
func (l *List) Matches(q *ListQuery) bool {
	s := l.set.Load()
	if s == nil {
		return false
	}
	switch l.Kind {
	case ListIP:
		return q.Addr.IsValid() && s.ContainsAddr(q.Addr)
	case ListASN:
		return q.ASN != "" && s.Contains(q.ASN)
	case ListAccount:
		return q.Account != "" && s.Contains(NormalizeAccount(q.Account))
	case ListUser:
		return q.UserID != "" && s.Contains(q.UserID)
	case ListDevice:
		return q.DeviceProven && q.DeviceID != "" && s.Contains(q.DeviceID)
	case ListAttr:
		v, ok := q.Attributes[l.Attr]
		return ok && v != "" && s.Contains(v)
	}
	return false
}

// MatchLists returns the list that decides the request q: the first deny
// list it is on (deny wins), else the first allow list, else nil. It does
// not allocate (see List.Matches).
//
// A device list, allow or deny, matches only a proven device id (7.1):
// an entry names a device proven by its token, while the app sends its
// device id in the clear, so a bare id is anyone's claim (on an allow
// list it would lend the device's exemption to whoever names it).
// Unverified traffic is limited by unverified_multiplier and by the claim
// subject of its id instead.
func (p *Policy) MatchLists(q *ListQuery) (l *List, deny bool) {
	for _, l := range p.Deny {
		if l.Matches(q) {
			return l, true
		}
	}
	for _, l := range p.Allow {
		if l.Matches(q) {
			return l, false
		}
	}
	return nil, false
}

// HasLists reports whether the policy has an allow or deny list.
func (p *Policy) HasLists() bool { return len(p.Allow)+len(p.Deny) > 0 }

// ListByName returns the list called name, or nil.
func (p *Policy) ListByName(name string) *List {
	for _, l := range p.Lists {
		if l.Name == name {
			return l
		}
	}
	return nil
}

// ListSet is the parsed content of a list file. It is immutable.
type ListSet struct {
	n int
	// IP lists: disjoint sorted ranges, per family.
	v4lo, v4hi []uint32
	v6lo, v6hi []u128
	// Other kinds: the canonical entries.
	values map[string]struct{}
}

// Len returns the number of entries read (duplicates included).
func (s *ListSet) Len() int { return s.n }

// Contains reports whether v is an entry (for kinds other than ip).
func (s *ListSet) Contains(v string) bool {
	_, ok := s.values[v]
	return ok
}

// ContainsAddr reports whether a is an entry or in a CIDR entry of an ip
// list: a binary search over merged ranges, without allocating.
func (s *ListSet) ContainsAddr(a netip.Addr) bool {
	if a.Is4() || a.Is4In6() {
		b := a.Unmap().As4()
		x := binary.BigEndian.Uint32(b[:])
		i := upperBound(s.v4lo, x, cmp.Compare[uint32])
		return i > 0 && x <= s.v4hi[i-1]
	}
	x := addrU128(a)
	i := upperBound(s.v6lo, x, u128.cmp)
	return i > 0 && s.v6hi[i-1].cmp(x) >= 0
}

// upperBound returns the number of elements of sorted xs that are <= x.
func upperBound[T any](xs []T, x T, compare func(a, b T) int) int {
	lo, hi := 0, len(xs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if compare(xs[m], x) <= 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// u128 is an IPv6 address as an unsigned integer.
type u128 struct{ hi, lo uint64 }

func (a u128) cmp(b u128) int {
	if c := cmp.Compare(a.hi, b.hi); c != 0 {
		return c
	}
	return cmp.Compare(a.lo, b.lo)
}

func addrU128(a netip.Addr) u128 {
	b := a.As16()
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// ParseList parses a list file's content: one entry a line, blank lines
// and `#` comments (a `#` at the start of a line or after white space)
// ignored. name is used in errors ("NAME:LINE: ..."). Entries of ip lists
// are addresses or CIDR prefixes; of asn lists numbers (AS64500 accepted);
// account entries are normalised (NormalizeAccount); the others are kept
// as written, at most MaxListValue bytes of printable UTF-8.
func ParseList(name string, kind ListKind, data []byte) (*ListSet, error) {
	if len(data) > MaxListFileSize {
		return nil, oneError(&Error{File: name, Line: 1, Msg: fmt.Sprintf("list file too large (more than %d bytes)", MaxListFileSize), Err: ErrTooLarge})
	}
	s := &ListSet{}
	if kind != ListIP {
		s.values = make(map[string]struct{})
	}
	var v4 []range4
	var v6 []range6
	var errs []*Error
	dropped := 0
	text := string(data)
	for line := 1; text != ""; line++ {
		var l string
		l, text, _ = strings.Cut(text, "\n")
		entry := listEntry(l)
		if entry == "" {
			continue
		}
		if s.n == MaxListEntries {
			errs = append(errs, &Error{File: name, Line: line, Msg: fmt.Sprintf("more than %d entries", MaxListEntries)})
			break
		}
		msg := s.add(kind, entry, &v4, &v6)
		if msg == "" {
			s.n++
			continue
		}
		if len(errs) >= maxCollected {
			dropped++
			continue
		}
		errs = append(errs, &Error{File: name, Line: line, Msg: fmt.Sprintf("%s entry %q: %s", kind, clipText(entry), msg)})
	}
	if err := joinErrors(errs, dropped); err != nil {
		return nil, err
	}
	s.v4lo, s.v4hi = merge4(v4)
	s.v6lo, s.v6hi = merge6(v6)
	return s, nil
}

// listEntry returns a line's entry: the line without its comment,
// trimmed ("" for none).
func listEntry(l string) string {
	for i := 0; i < len(l); i++ {
		if l[i] == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t') {
			l = l[:i]
			break
		}
	}
	return strings.TrimSpace(l)
}

type (
	range4 struct{ lo, hi uint32 }
	range6 struct{ lo, hi u128 }
)

// add adds one entry, returning "" or what is wrong with it.
func (s *ListSet) add(kind ListKind, entry string, v4 *[]range4, v6 *[]range6) string {
	switch kind {
	case ListIP:
		pfx, err := parsePrefixOrAddr(entry)
		if err != nil {
			return err.Error()
		}
		if a := pfx.Addr(); a.Is4In6() && pfx.Bits() >= 96 {
			pfx = netip.PrefixFrom(a.Unmap(), pfx.Bits()-96)
		}
		if pfx.Addr().Is4() {
			b := pfx.Addr().As4()
			lo := binary.BigEndian.Uint32(b[:])
			*v4 = append(*v4, range4{lo, lo | uint32((uint64(1)<<(32-pfx.Bits()))-1)})
			return ""
		}
		lo := addrU128(pfx.Addr())
		hi := lo
		host := 128 - pfx.Bits()
		switch {
		case host >= 128:
			hi = u128{^uint64(0), ^uint64(0)}
		case host >= 64:
			hi.lo = ^uint64(0)
			hi.hi |= (uint64(1) << (host - 64)) - 1
		default:
			hi.lo |= (uint64(1) << host) - 1
		}
		*v6 = append(*v6, range6{lo, hi})
		return ""
	case ListASN:
		digits := entry
		if len(digits) > 2 && strings.EqualFold(digits[:2], "as") {
			digits = digits[2:]
		}
		n, err := strconv.ParseUint(digits, 10, 32)
		if err != nil || !allDigits(digits) {
			return "want an AS number (64500 or AS64500)"
		}
		s.values[strconv.FormatUint(n, 10)] = struct{}{}
		return ""
	case ListAccount:
		entry = NormalizeAccount(entry)
	}
	if len(entry) > MaxListValue {
		return fmt.Sprintf("longer than %d bytes", MaxListValue)
	}
	if !utf8.ValidString(entry) {
		return "not valid UTF-8"
	}
	for i := 0; i < len(entry); i++ {
		if c := entry[i]; c < 0x20 || c == 0x7f {
			return "contains a control character"
		}
	}
	s.values[strings.Clone(entry)] = struct{}{} // not a slice of the whole file
	return ""
}

// merge4 sorts and merges overlapping or adjacent ranges.
func merge4(rs []range4) (lo, hi []uint32) {
	slices.SortFunc(rs, func(a, b range4) int { return cmp.Compare(a.lo, b.lo) })
	for _, r := range rs {
		if n := len(hi); n > 0 && (hi[n-1] == ^uint32(0) || r.lo <= hi[n-1]+1) {
			hi[n-1] = max(hi[n-1], r.hi)
			continue
		}
		lo, hi = append(lo, r.lo), append(hi, r.hi)
	}
	return lo, hi
}

// merge6 is merge4 for IPv6.
func merge6(rs []range6) (lo, hi []u128) {
	slices.SortFunc(rs, func(a, b range6) int { return a.lo.cmp(b.lo) })
	for _, r := range rs {
		if n := len(hi); n > 0 {
			last := hi[n-1]
			next := u128{last.hi, last.lo + 1}
			if last.lo == ^uint64(0) {
				next = u128{last.hi + 1, 0}
			}
			full := last == u128{^uint64(0), ^uint64(0)}
			if full || r.lo.cmp(next) <= 0 {
				if r.hi.cmp(last) > 0 {
					hi[n-1] = r.hi
				}
				continue
			}
		}
		lo, hi = append(lo, r.lo), append(hi, r.hi)
	}
	return lo, hi
}

// readList reads and parses a list file, returning its entries and the
// SHA-256 of its content.
func readList(path string, kind ListKind) (*ListSet, [32]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, [32]byte{}, fmt.Errorf("policy: read list: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxListFileSize+1))
	if err != nil {
		return nil, [32]byte{}, fmt.Errorf("policy: read list %q: %w", path, err)
	}
	sum := sha256.Sum256(data)
	s, err := ParseList(path, kind, data)
	return s, sum, err
}

// LoadList reads the list file at path (errors are "PATH:LINE: ...").
func LoadList(path string, kind ListKind) (*ListSet, error) {
	s, _, err := readList(path, kind)
	return s, err
}

// errListKind is the error for a bad list kind.
var errListKind = errors.New("want ip, asn, account, user, device or attr:NAME")

// parseListKind parses a list's `kind`.
func parseListKind(s string) (ListKind, string, error) {
	if name, ok := strings.CutPrefix(s, "attr:"); ok {
		if !ValidAttrName(name) {
			return 0, "", fmt.Errorf("attribute name %q: want 1-%d characters of a-z 0-9 _", name, MaxAttrName)
		}
		return ListAttr, name, nil
	}
	for i, n := range listKindNames {
		if n == s {
			return ListKind(i + 1), "", nil
		}
	}
	return 0, "", errListKind
}

// clipText shortens s for an error message.
func clipText(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
