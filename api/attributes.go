package api

import (
	"fmt"
	"net/http"
	"sort"

	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
)

// checkAttributes validates a request's attributes (CONTRACT 6.9): at most
// policy.MaxAttributes, each name and value as policy.CheckAttribute says.
// The error names the attribute (the first bad one by name).
func checkAttributes(attrs map[string]string) *apiError {
	if len(attrs) > policy.MaxAttributes {
		return badRequest(fmt.Sprintf(`field "attributes" has %d entries, at most %d`, len(attrs), policy.MaxAttributes))
	}
	var bad []string
	for name, v := range attrs {
		if policy.CheckAttribute(name, v) != "" {
			bad = append(bad, name)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	name := bad[0]
	if !policy.ValidAttrName(name) {
		return badRequest(fmt.Sprintf(`field "attributes": %q is not a valid attribute name (want 1-%d characters of a-z 0-9 _)`,
			clip(name), policy.MaxAttrName))
	}
	return badRequest(`field "attributes.` + name + `" ` + policy.CheckAttribute(name, attrs[name]))
}

// attributesFromHeaders fills in.Attributes from the request headers the
// policy's identity.attributes names (proxy mode and forward auth). A
// header sent more than once, in any spelling an upstream would merge
// with it (headerValue: case, '_' for '-'), is 400, as is a value that is too long or
// not printable; an absent header leaves its attribute absent. Call it on
// the original request's headers.
func attributesFromHeaders(h http.Header, ident *policy.Identity, in *engine.Input) *apiError {
	if len(ident.Attributes) == 0 {
		return nil
	}
	var attrs map[string]string
	for _, a := range ident.Attributes {
		v, n := headerValue(h, a.Header)
		switch {
		case n == 0:
			continue
		case n > 1:
			return badRequest(fmt.Sprintf("header %s (attribute %s) is sent more than once (in some spelling); send it once", a.Header, a.Name))
		}
		if msg := policy.CheckAttribute(a.Name, v); msg != "" {
			return badRequest(fmt.Sprintf("header %s (attribute %s) %s", a.Header, a.Name, msg))
		}
		if attrs == nil {
			attrs = make(map[string]string, len(ident.Attributes))
		}
		attrs[a.Name] = v
	}
	in.Attributes = attrs
	return nil
}
