package policy

import (
	"sort"
	"strings"
)

// EnvoyField is the request field an Envoy descriptor entry fills.
type EnvoyField uint8

// The fields a descriptor entry may fill (the values of `envoy.entries`).
const (
	EnvoyIP      EnvoyField = iota + 1 // ip: the client address
	EnvoyUser                          // user: user_id (the request is authenticated)
	EnvoyDevice                        // device: device_id
	EnvoyAccount                       // account: the account (normalised like every path's)
	EnvoyMethod                        // endpoint_method: the endpoint's METHOD
	EnvoyPath                          // endpoint_path: the endpoint's /path (query dropped)
	EnvoyAttr                          // attr:NAME: the attribute NAME
)

// envoyFieldNames maps the written names to fields (attr:NAME aside).
var envoyFieldNames = map[string]EnvoyField{
	"ip": EnvoyIP, "user": EnvoyUser, "device": EnvoyDevice, "account": EnvoyAccount,
	"endpoint_method": EnvoyMethod, "endpoint_path": EnvoyPath,
}

// String returns the field as written in the policy ("attr" for EnvoyAttr).
func (f EnvoyField) String() string {
	for name, v := range envoyFieldNames {
		if v == f {
			return name
		}
	}
	if f == EnvoyAttr {
		return "attr"
	}
	return "unknown"
}

// EnvoyTarget is where one descriptor entry key goes.
type EnvoyTarget struct {
	// Field is the request field the entry's value fills.
	Field EnvoyField
	// Attr is the attribute's name when Field is EnvoyAttr.
	Attr string
}

// Envoy is the `envoy` section (contract 6.10): how the Envoy rate-limit
// service (`--grpc-listen`) turns a RateLimitRequest into one request.
// The zero value (no section) answers every domain OK with no limit.
type Envoy struct {
	// Domain is the rate-limit domain this policy answers; requests for
	// another domain are OK with no limit.
	Domain string
	// Entries maps a descriptor entry key (as Envoy sends it, e.g.
	// "remote_address") to the request field it fills. Keys not listed
	// are ignored.
	Entries map[string]EnvoyTarget
	// Line is the section's line in the policy file.
	Line int
}

// Limits of the envoy section.
const (
	maxEnvoyEntries = 64
	maxEnvoyKey     = 128
)

var envoyFields = []string{"domain", "entries"}

// envoy parses the `envoy` section.
func (ps *parser) envoy(f field) *Envoy {
	m := ps.mapping(f.val, f.name, envoyFields)
	if m == nil {
		return nil
	}
	e := &Envoy{Line: f.key.Line, Entries: map[string]EnvoyTarget{}}
	if !ps.require(m, "envoy", "domain", "entries") {
		return e
	}
	g, _ := m.get("domain")
	if s, ok := ps.str(g); ok {
		if !validDomain(s) {
			ps.errorf(g.val, "envoy domain %q: want 1-%d printable characters without spaces", s, maxEnvoyKey)
		} else {
			e.Domain = s
		}
	}
	g, _ = m.get("entries")
	em := ps.mapping(g.val, "envoy entries", nil)
	if em == nil {
		return e
	}
	if len(em.fields) == 0 {
		ps.errorf(g.val, "envoy entries: must not be empty (map descriptor entry keys to ip, user, device, account, endpoint_method, endpoint_path or attr:NAME)")
		return e
	}
	if len(em.fields) > maxEnvoyEntries {
		ps.errorf(g.val, "envoy entries: %d keys, at most %d", len(em.fields), maxEnvoyEntries)
		return e
	}
	for _, h := range em.fields {
		if !validDomain(h.name) {
			ps.errorf(h.key, "envoy entries: key %q: want 1-%d printable characters without spaces", h.name, maxEnvoyKey)
			continue
		}
		s, ok := ps.str(h)
		if !ok {
			continue
		}
		t, ok := envoyTargetOf(s)
		if !ok {
			ps.errorf(h.val, "envoy entries: %s: %q is not a request field (want %s or attr:NAME, NAME 1-%d of a-z 0-9 _)",
				h.name, s, strings.Join(envoyFieldList(), ", "), MaxAttrName)
			continue
		}
		e.Entries[h.name] = t
	}
	return e
}

// envoyTargetOf parses an entries value: a field name or attr:NAME.
func envoyTargetOf(s string) (EnvoyTarget, bool) {
	if name, ok := strings.CutPrefix(s, "attr:"); ok {
		return EnvoyTarget{Field: EnvoyAttr, Attr: name}, ValidAttrName(name)
	}
	f, ok := envoyFieldNames[s]
	return EnvoyTarget{Field: f}, ok
}

// envoyFieldList is the written field names, sorted, for messages.
func envoyFieldList() []string {
	out := make([]string, 0, len(envoyFieldNames))
	for name := range envoyFieldNames {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// validDomain accepts 1-128 bytes of printable ASCII without spaces.
func validDomain(s string) bool {
	if len(s) == 0 || len(s) > maxEnvoyKey {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}
