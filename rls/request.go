package rls

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
)

// Bounds on one RateLimitRequest.
const (
	// MaxDescriptors bounds the descriptors of a request.
	MaxDescriptors = 64
	// MaxEntries bounds the entries of one descriptor.
	MaxEntries = 64
)

// RequestError is a RateLimitRequest that cannot be decided on. Its
// values are mostly the client's own headers, so the server denies it:
// OVER_LIMIT with the check API's 400 envelope (BAD_REQUEST, Msg as its
// message) in raw_body, never a gRPC error, which Envoy would answer by
// its failure_mode_deny (false in the documented configuration: the
// request would pass unlimited).
type RequestError struct{ Msg string }

func (e *RequestError) Error() string { return "rls: " + e.Msg }

func bad(format string, args ...any) *RequestError {
	return &RequestError{Msg: fmt.Sprintf(format, args...)}
}

// endpoint collects the endpoint's two halves.
type endpoint struct{ method, path string }

// Map turns req into the one request it describes, following the policy's
// envoy section e: each descriptor entry whose key e.Entries names fills
// its field (other keys are ignored), the endpoint is "METHOD PATH" when
// both halves are present (else "", no route), and the cost is
// hits_addend (0 means 1) or, when descriptors carry their own, the
// largest of theirs. Descriptors with is_negative_hits are skipped: the
// limiter never gives tokens back. A field given twice with different
// values, an invalid value and a request over the bounds are a
// *RequestError. Account ids are normalised (6.4). It does not look at
// req.Domain.
func Map(e *policy.Envoy, req *rlsv3.RateLimitRequest, in *engine.Input) error {
	*in = engine.Input{Cost: 1}
	if len(req.Descriptors) > MaxDescriptors {
		return bad("more than %d descriptors", MaxDescriptors)
	}
	// Every descriptor is bounded, those with is_negative_hits too, as
	// the decoder bounds them before decoding (pooledRequest.overBounds).
	for i, d := range req.Descriptors {
		if len(d.Entries) > MaxEntries {
			return bad("descriptor %d: more than %d entries", i, MaxEntries)
		}
	}
	if req.HitsAddend > 0 {
		in.Cost = float64(req.HitsAddend)
	}
	var ep endpoint
	own := uint64(0)
	for _, d := range req.Descriptors {
		if d.GetIsNegativeHits() {
			continue
		}
		if h := d.GetHitsAddend(); h != nil && h.Value > own {
			own = h.Value
		}
		for _, en := range d.Entries {
			t, ok := e.Entries[en.GetKey()]
			if !ok || en.GetValue() == "" {
				continue
			}
			if err := set(in, &ep, t, en.GetKey(), en.GetValue()); err != nil {
				return err
			}
		}
	}
	if own > 0 {
		in.Cost = float64(own)
	}
	if in.Cost > policy.MaxCost {
		return bad("hits_addend %s is more than %d", strconv.FormatFloat(in.Cost, 'f', -1, 64), policy.MaxCost)
	}
	if ep.method != "" && ep.path != "" {
		in.Endpoint = ep.method + " " + ep.path
		if len(in.Endpoint) > policy.MaxEndpointLen {
			return bad("endpoint is longer than %d bytes", policy.MaxEndpointLen)
		}
	}
	return nil
}

// set stores one entry's value in its field.
func set(in *engine.Input, ep *endpoint, t policy.EnvoyTarget, key, v string) error {
	switch t.Field {
	case policy.EnvoyIP:
		ip, err := netip.ParseAddr(v)
		if err != nil || ip.Zone() != "" {
			return bad("entry %q: not an IP address: %q", clip(key), clip(v))
		}
		// netip reads IPv4 only in its canonical form (no leading zeros),
		// so v is already ip.String(): spare the allocation.
		s := v
		if !ip.Is4() {
			ip = ip.Unmap()
			s = ip.String()
		}
		return same(&in.IP, s, key, "ip", func() { in.Addr = ip })
	case policy.EnvoyUser:
		return id(&in.UserID, key, "user", v)
	case policy.EnvoyDevice:
		return id(&in.DeviceID, key, "device", v)
	case policy.EnvoyAccount:
		return id(&in.Account, key, "account", policy.NormalizeAccount(v))
	case policy.EnvoyMethod:
		if !isToken(v) {
			return bad("entry %q: not an HTTP method: %q", clip(key), clip(v))
		}
		return same(&ep.method, v, key, "endpoint_method", nil)
	case policy.EnvoyPath:
		return setPath(ep, key, v)
	case policy.EnvoyAttr:
		return setAttr(in, t.Attr, key, v)
	}
	return nil
}

// id stores a user, device or account id, checked as the check API checks it.
func id(dst *string, key, field, v string) error {
	if msg := policy.CheckID(v); msg != "" {
		return bad("entry %q (%s) %s", clip(key), field, msg)
	}
	return same(dst, v, key, field, nil)
}

// setPath stores the endpoint's path as route matching sees it in proxy
// mode (6.4): its query string dropped, then policy.RoutePath, so that
// "/auth%2Flogin", "/auth/%6cogin" and "//auth/./login/" are the route of
// "/auth/login" (Envoy's :path is the client's, undecoded). The path as
// sent is bounded by policy.MaxEndpointLen and must be printable UTF-8;
// decoded, it must still be UTF-8 without control characters (a space
// is kept, as proxy mode keeps it).
func setPath(ep *endpoint, key, v string) error {
	if i := strings.IndexAny(v, "?#"); i >= 0 {
		v = v[:i]
	}
	if !strings.HasPrefix(v, "/") {
		return bad("entry %q: the path must start with /: %q", clip(key), clip(v))
	}
	if len(v) > policy.MaxEndpointLen {
		return bad("entry %q: the path is longer than %d bytes", clip(key), policy.MaxEndpointLen)
	}
	if !utf8.ValidString(v) {
		return bad("entry %q: the path is not valid UTF-8", clip(key))
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c == 0x7f {
			return bad("entry %q: the path has a space or control character", clip(key))
		}
	}
	if !cleanPath(v) {
		v = policy.RoutePath(v)
		if !utf8.ValidString(v) {
			return bad("entry %q: the path is not valid UTF-8 once decoded", clip(key))
		}
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < ' ' || c == 0x7f {
				return bad("entry %q: the path has a control character once decoded", clip(key))
			}
		}
	}
	return same(&ep.path, v, key, "endpoint_path", nil)
}

// cleanPath reports whether policy.RoutePath would return the rooted
// path p unchanged, sparing its allocation: p has no escape, no empty
// segment or trailing slash, and no segment starting with "." (a dot
// segment, or a name such as .well-known that RoutePath keeps).
func cleanPath(p string) bool {
	return !strings.Contains(p, "%") && !strings.Contains(p, "//") && !strings.Contains(p, "/.") &&
		(p == "/" || !strings.HasSuffix(p, "/"))
}

// setAttr stores attribute name, checked as the check API checks it (6.9).
func setAttr(in *engine.Input, name, key, v string) error {
	if msg := policy.CheckAttribute(name, v); msg != "" {
		return bad("entry %q: attribute %q %s", clip(key), name, msg)
	}
	if old, ok := in.Attributes[name]; ok {
		if old != v {
			return bad("attribute %q is given two different values (%q, then %q in entry %q)", name, clip(old), clip(v), clip(key))
		}
		return nil
	}
	if len(in.Attributes) == policy.MaxAttributes {
		return bad("more than %d attributes", policy.MaxAttributes)
	}
	if in.Attributes == nil {
		in.Attributes = make(map[string]string, 4)
	}
	in.Attributes[name] = v
	return nil
}

// same stores v in *dst unless another entry gave the field a different
// value; then is called after a first store.
func same(dst *string, v, key, field string, then func()) error {
	if *dst == "" {
		*dst = v
		if then != nil {
			then()
		}
		return nil
	}
	if *dst != v {
		return bad("%s is given two different values (%q, then %q in entry %q)", field, clip(*dst), clip(v), clip(key))
	}
	return nil
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// clip shortens s for a message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
