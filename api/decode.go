package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/internal/jsonscan"
	"github.com/tollgate-dev/tollgate/policy"
)

// Bounds on the check request.
const (
	// MaxBody is the largest request body accepted (64 KiB); larger is 413.
	MaxBody = 64 << 10
	// MaxIDLen bounds user_id, device_id and account, in bytes
	// (policy.MaxIDLen: every way in has the same bounds).
	MaxIDLen = policy.MaxIDLen
	// MaxEndpointLen bounds endpoint, in bytes.
	MaxEndpointLen = policy.MaxEndpointLen
	// MaxCost bounds cost.
	MaxCost = policy.MaxCost
)

// checkRequest is the body of POST /v1/check.
type checkRequest struct {
	Endpoint *string         `json:"endpoint"`
	IP       *string         `json:"ip"`
	UserID   *string         `json:"user_id"`
	DeviceID *string         `json:"device_id"`
	Account  *string         `json:"account"`
	Cost     json.RawMessage `json:"cost"`
	// DeviceToken proves DeviceID attested (6.3); a bad one is no error,
	// the request is merely unverified.
	DeviceToken *string `json:"device_token"`
	// Attributes are the request's attributes (CONTRACT 6.9).
	Attributes map[string]string `json:"attributes"`
	// vals holds the string fields' values when scanCheck read them: the
	// fields point here instead of at a string each of their own.
	vals [checkStrings]string
}

// checkStrings counts checkRequest's string fields: endpoint, ip, user_id,
// device_id, account and device_token, in this order in vals.
const checkStrings = 6

// decodeCheck parses and validates a check body into in. Every failure is
// a 400 whose message names the field.
func decodeCheck(body []byte, in *engine.Input) *apiError {
	var req checkRequest
	if !scanCheck(body, &req) {
		req = checkRequest{}
		if aerr := unmarshalStrict(body, &req); aerr != nil {
			return aerr
		}
	}
	if req.Endpoint == nil || *req.Endpoint == "" {
		return badRequest(`field "endpoint" is required`)
	}
	if msg := checkEndpoint(*req.Endpoint); msg != "" {
		return badRequest(`field "endpoint" ` + msg)
	}
	if req.IP == nil || *req.IP == "" {
		return badRequest(`field "ip" is required`)
	}
	ip, err := netip.ParseAddr(*req.IP)
	if err != nil || ip.Zone() != "" {
		return badRequest(fmt.Sprintf(`field "ip" is not an IP address: %q`, clip(*req.IP)))
	}
	ep, msg := routedEndpoint(*req.Endpoint)
	if msg != "" {
		return badRequest(`field "endpoint" ` + msg)
	}
	*in = engine.Input{Endpoint: ep, IP: ipText(*req.IP, ip.Unmap()), Addr: ip.Unmap(), Cost: 1}
	normalizeAccount(&req.Account)
	if aerr := copyIDs(idField{"user_id", req.UserID, &in.UserID}, idField{"device_id", req.DeviceID, &in.DeviceID},
		idField{"account", req.Account, &in.Account}); aerr != nil {
		return aerr
	}
	if req.DeviceToken != nil && len(*req.DeviceToken) <= MaxIDLen {
		in.DeviceToken = *req.DeviceToken
	}
	if len(req.Cost) > 0 && string(req.Cost) != "null" {
		if c := req.Cost[0]; c != '-' && (c < '0' || c > '9') {
			return badRequest(`field "cost" must be a number`)
		}
		c, err := strconv.ParseInt(string(req.Cost), 10, 64)
		switch {
		case err != nil && strings.ContainsAny(string(req.Cost), ".eE"):
			return badRequest(`field "cost" must be a whole number`)
		case err != nil || c > MaxCost:
			return badRequest(fmt.Sprintf(`field "cost" must be between 0 and %d`, MaxCost))
		case c < 0:
			return badRequest(`field "cost" must not be negative`)
		}
		in.Cost = float64(c)
	}
	if len(req.Attributes) > 0 {
		if aerr := checkAttributes(req.Attributes); aerr != nil {
			return aerr
		}
		in.Attributes = req.Attributes
	}
	return nil
}

// ipText returns addr's canonical text: sent itself (the text addr was
// parsed from) when it already is that, as most clients send it, so only
// the other forms are formatted anew.
func ipText(sent string, addr netip.Addr) string {
	var buf [64]byte // the longest IPv6 text is 45 bytes (no zone: refused)
	if string(addr.AppendTo(buf[:0])) == sent {
		return sent
	}
	return addr.String()
}

// decodeStrict reads r's body (at most MaxBody) into v with
// unmarshalStrict.
func decodeStrict(r *http.Request, v any) *apiError {
	body, aerr := readBody(r, nil)
	if aerr != nil {
		return aerr
	}
	return unmarshalStrict(body, v)
}

// unmarshalStrict decodes one JSON object from body into v with
// encoding/json, refusing unknown fields and trailing data: the bodies
// of every JSON endpoint are read this way (check's when its fast path
// declines).
func unmarshalStrict(body []byte, v any) *apiError {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("body: unexpected data after the JSON object")
	}
	return nil
}

// scanCheck is unmarshalStrict's fast path for a check body, without reflection, for the
// plain form clients send: the contract's field names, strings without
// escapes, an integer cost. It reports false on anything else (req is then
// partly filled), and the caller decodes with unmarshalStrict, so a body
// means the same either way (FuzzScanCheck checks).
func scanCheck(body []byte, req *checkRequest) bool {
	s := jsonscan.New(body)
	var found [checkStrings][]byte // the string fields' values, in body; nil: absent
	str := func(i int) bool {
		v, ok := s.String()
		found[i] = v
		return ok
	}
	ok := s.Object(func(key []byte) bool {
		switch string(key) {
		case "endpoint":
			return str(0)
		case "ip":
			return str(1)
		case "user_id":
			return str(2)
		case "device_id":
			return str(3)
		case "account":
			return str(4)
		case "device_token":
			return str(5)
		case "cost":
			_, text, ok := s.Integer()
			req.Cost = json.RawMessage(text)
			return ok
		case "attributes":
			return req.Attributes == nil && scanAttributes(&s, &req.Attributes)
		}
		return false
	}) && s.End()
	if ok {
		req.setStrings(&found)
	}
	return ok
}

// setStrings points req's string fields at the values found (in the order
// of checkStrings). Those within their field's bound are copied out of the
// body together, one allocation for all of them instead of two for each
// (the bytes and the field's string); a longer one, which the check refuses
// or (a device token) ignores, gets its own, so the identifiers a decision
// keeps (its event waits in the publisher's queue) never hold it in memory.
func (req *checkRequest) setStrings(found *[checkStrings][]byte) {
	n := 0
	for i, v := range found {
		if len(v) <= checkBounds[i] {
			n += len(v)
		}
	}
	var b strings.Builder
	b.Grow(n)
	for i, v := range found {
		if len(v) <= checkBounds[i] {
			b.Write(v)
		}
	}
	shared := b.String()
	fields := [checkStrings]**string{&req.Endpoint, &req.IP, &req.UserID, &req.DeviceID, &req.Account, &req.DeviceToken}
	for i, v := range found {
		switch {
		case v == nil:
			continue
		case len(v) <= checkBounds[i]:
			req.vals[i], shared = shared[:len(v)], shared[len(v):]
		default:
			req.vals[i] = string(v)
		}
		*fields[i] = &req.vals[i]
	}
}

// checkBounds is the longest valid value of each string field, in the
// order of checkStrings (an IP address's text is at most 45 bytes).
var checkBounds = [checkStrings]int{MaxEndpointLen, 64, MaxIDLen, MaxIDLen, MaxIDLen, MaxIDLen}

// scanAttributes reads an object of plain strings into a new map, as
// encoding/json would (a repeated name keeps its last value).
func scanAttributes(s *jsonscan.Scanner, dst *map[string]string) bool {
	m := map[string]string{}
	*dst = m
	return s.Object(func(key []byte) bool {
		v, ok := s.String()
		if ok {
			m[string(key)] = string(v)
		}
		return ok
	})
}

// normalizeAccount replaces a body's account by its canonical form (6.4);
// one that is empty then is absent. One with bad UTF-8 or a control
// character is left for copyIDs to refuse (lower-casing would hide bad
// UTF-8); its length is judged normalised, by copyIDs, as Envoy's account
// entry judges it: "frank" padded with white space past MaxIDLen is frank.
func normalizeAccount(acct **string) {
	if *acct != nil && printable(**acct) == "" {
		a := policy.NormalizeAccount(**acct)
		*acct = &a
		if a == "" {
			*acct = nil
		}
	}
}

// accountID returns the account raw names (policy.NormalizeAccount), or ""
// when it names none a request may carry (CheckAccount).
func accountID(raw string) string {
	a, msg := CheckAccount(raw)
	if msg != "" {
		return ""
	}
	return a
}

// CheckAccount returns the account raw names (policy.NormalizeAccount)
// and "", or what is wrong with it as the check API words it: bad UTF-8
// or a control character as sent, or over MaxIDLen once normalised. Its
// length is judged normalised, as Envoy's account entry and the check
// API judge it: an app trims the white space that padded "frank" past
// MaxIDLen, and logs the login in as frank
// (TestAttackPaddedAccountHeaderEscapesLockout). An account that is empty
// once normalised is "" with no error: none.
func CheckAccount(raw string) (string, string) {
	if msg := printable(raw); msg != "" {
		return "", msg
	}
	a := policy.NormalizeAccount(raw)
	if msg := CheckID(a); msg != "" {
		return "", msg
	}
	return a, ""
}

// idField is an optional identifier of a request body and where it goes.
type idField struct {
	name string
	v    *string
	dst  *string
}

// copyIDs validates the present identifiers and copies them; the error
// names the first bad field.
func copyIDs(fields ...idField) *apiError {
	for _, f := range fields {
		if f.v == nil {
			continue
		}
		if msg := CheckID(*f.v); msg != "" {
			return badRequest(`field "` + f.name + `" ` + msg)
		}
		*f.dst = *f.v
	}
	return nil
}

// jsonError turns a decoding error into a 400 that names the field.
func jsonError(err error) *apiError {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return badRequest("body: empty; expected a JSON object")
	case errors.As(err, &syn):
		return badRequest(fmt.Sprintf("body: invalid JSON at byte %d: %s", syn.Offset, syn.Error()))
	case errors.As(err, &typ):
		if typ.Field == "" {
			return badRequest("body: expected a JSON object")
		}
		want, k := "a string", reflect.Invalid
		if typ.Type != nil {
			k = typ.Type.Kind()
		}
		switch {
		case typ.Field == "cost":
			want = "a number"
		case typ.Field == "attributes":
			want = "an object of string values"
		case k >= reflect.Int && k <= reflect.Float64:
			if n, ok := strings.CutPrefix(typ.Value, "number "); ok {
				// a number that does not fit (1e999 for a float64)
				return badRequest(fmt.Sprintf(`field %q is out of range: %s`, typ.Field, clip(n)))
			}
			want = "a number"
		case k == reflect.Bool:
			want = "true or false"
		}
		return badRequest(fmt.Sprintf(`field %q must be %s`, typ.Field, want))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("body: truncated JSON")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return badRequest("unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return badRequest("body: " + err.Error())
}

// routedEndpoint returns a valid endpoint (checkEndpoint) as it is
// decided: its path without the query string or fragment, seen as an
// upstream sees it (policy.RoutePath: unreserved escapes and %2F
// decoded, dot segments and repeated slashes cleaned), as forward auth
// and Envoy's path entry route it. A backend may pass the URI as the
// client sent it: "POST /auth/login?next=/" and "POST /auth/%6cogin" are
// the login route. A path that decodes to bad UTF-8 or a control
// character is refused (msg, as Envoy's path entry refuses it).
func routedEndpoint(ep string) (routed, msg string) {
	method, sent, _ := strings.Cut(ep, " ")
	path := sent
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	if !cleanPath(path) {
		if path = policy.RoutePath(path); !utf8.ValidString(path) {
			return "", "is not valid UTF-8 once decoded"
		}
		for i := 0; i < len(path); i++ {
			if c := path[i]; c < ' ' || c == 0x7f {
				return "", "has a control character once decoded"
			}
		}
	}
	if path == sent {
		return ep, ""
	}
	return method + " " + path, ""
}

// cleanPath reports whether policy.RoutePath would return the rooted
// path p unchanged (as the Envoy path entry's check): no escape, no empty
// segment or trailing slash, no segment starting with ".".
func cleanPath(p string) bool {
	return !strings.Contains(p, "%") && !strings.Contains(p, "//") && !strings.Contains(p, "/.") &&
		(p == "/" || !strings.HasSuffix(p, "/"))
}

// checkEndpoint validates "METHOD /path"; it returns "" or what is wrong.
func checkEndpoint(s string) string {
	if len(s) > MaxEndpointLen {
		return fmt.Sprintf("is longer than %d bytes", MaxEndpointLen)
	}
	method, path, ok := strings.Cut(s, " ")
	if !ok || method == "" || !strings.HasPrefix(path, "/") {
		return `must be "METHOD /path"`
	}
	for i := 0; i < len(method); i++ {
		if !isTokenChar(method[i]) {
			return `must be "METHOD /path": bad method`
		}
	}
	for i := 0; i < len(path); i++ {
		if c := path[i]; c <= ' ' || c == 0x7f {
			return `must be "METHOD /path": the path has a space or control character`
		}
	}
	if !utf8.ValidString(path) {
		return "is not valid UTF-8"
	}
	return ""
}

// CheckID applies the check API's rules to an identifier (user_id,
// device_id, account): at most MaxIDLen bytes of printable UTF-8. It
// returns "" or what is wrong, for a message naming the field.
func CheckID(s string) string { return policy.CheckID(s) }

// printable returns "" when s is UTF-8 without control characters, else
// what is wrong.
func printable(s string) string {
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return "contains a control character"
		}
	}
	return ""
}

func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
