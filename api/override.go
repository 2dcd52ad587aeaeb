package api

import (
	"bytes"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"

	"github.com/tollgate-dev/tollgate/policy"
)

// overrideHeaders are the headers in which a framework reads the method a
// request is served as: Rack::MethodOverride, Symfony, Express's
// method-override and ASP.NET read X-HTTP-Method-Override; OData and
// some SDKs X-HTTP-Method; others X-Method-Override.
var overrideHeaders = [...]string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"}

// pathHeaders are the headers in which some upstreams read the request's
// path: Symfony before CVE-2018-14773's fix, Zend Framework, and IIS's URL
// Rewrite in front of them take X-Original-URL or X-Rewrite-URL as the
// request URI.
var pathHeaders = [...]string{"X-Original-URL", "X-Rewrite-URL"}

// overrideField is the form and query field Rails, Sinatra, Symfony and
// Laravel read as the method of a POST.
const overrideField = "_method"

// unroutedMethod is a method no route names: it matches the "*" routes
// alone, as any method the policy does not name does (Symfony serves a
// POST as whatever method its override names).
const unroutedMethod = "~"

// checkOverride refuses (400) a request whose method override, in a
// header (any spelling headerValue reads) or the query string's _method
// field (split at ";" too), names a method whose route is not the
// request's own, or whose path header (pathHeaders) names a path routed
// otherwise: the upstream would serve it under another route's limits
// (7.1). An override that routes the same way passes.
func checkOverride(pol *policy.Policy, r *http.Request, method, path string) *apiError {
	for k, vs := range r.Header {
		for _, name := range overrideHeaders {
			if !sameHeaderName(k, name) {
				continue
			}
			for _, v := range vs {
				if aerr := sameRoute(pol, method, v, path, "header "+name); aerr != nil {
					return aerr
				}
			}
		}
		for _, name := range pathHeaders {
			if !sameHeaderName(k, name) {
				continue
			}
			for _, v := range vs {
				if aerr := samePathRoute(pol, method, path, v, name); aerr != nil {
					return aerr
				}
			}
		}
	}
	if !strings.ContainsAny(r.URL.RawQuery, "_%") {
		return nil // no _method in any spelling: skip parsing the query
	}
	return formOverride(pol, method, path, strings.ReplaceAll(r.URL.RawQuery, ";", "&"), "query string")
}

// formOverride checks the _method fields of a url-encoded form (keys
// matched ignoring case, as the account field's are).
func formOverride(pol *policy.Policy, method, path, form, where string) *apiError {
	vals, _ := url.ParseQuery(form) // what parsed, as net/http's ParseForm keeps it
	for k, vs := range vals {
		if strings.EqualFold(k, overrideField) {
			for _, v := range vs {
				if aerr := sameRoute(pol, method, v, path, where+": field "+overrideField); aerr != nil {
					return aerr
				}
			}
		}
	}
	return nil
}

// sameRoute is nil when path routes under override as under method (or
// the override is empty, which names no method), else the 400 naming
// where the override came from.
func sameRoute(pol *policy.Policy, method, override, path, where string) *apiError {
	override = strings.TrimSpace(override)
	if override == "" || strings.EqualFold(override, method) {
		return nil
	}
	_, want := pol.Route(method, path)
	if _, got := pol.Route(override, path); got == want {
		return nil
	}
	return badRequest(where + " names method " + quoteClip(override) + ", which is routed otherwise than " + method +
		" " + clip(path) + "; send the request with that method")
}

// samePathRoute is nil when uri, the value of the path header name, names
// a path that routes as path does under method, else the 400 naming it.
func samePathRoute(pol *policy.Policy, method, path, uri, name string) *apiError {
	u, err := url.Parse(strings.TrimSpace(uri))
	if err != nil {
		return badRequest("header " + name + " is not a URI: " + quoteClip(uri))
	}
	_, want := pol.Route(method, path)
	if _, got := pol.Route(method, policy.RoutePath(u.EscapedPath())); got == want {
		return nil
	}
	return badRequest("header " + name + " names path " + quoteClip(u.Path) + ", which is routed otherwise than " + method +
		" " + clip(path) + "; send the request to that path")
}

// quoteClip quotes s, clipped to a length an error message can carry.
func quoteClip(s string) string {
	if len(s) > 32 {
		s = s[:32] + "..."
	}
	return `"` + strings.ToValidUTF8(s, "?") + `"`
}

// bodyOverrides reports whether a POST's body may carry a _method field
// that matters: a form body (url-encoded or multipart) on a path that
// some method routes otherwise than POST: a method a route names (GET
// also as HEAD), or any other (unroutedMethod).
func bodyOverrides(pol *policy.Policy, r *http.Request, path string) bool {
	if r.Method != http.MethodPost || !hasBody(r) || formKind(r.Header.Get("Content-Type")) == "" {
		return false
	}
	_, post := pol.Route(http.MethodPost, path)
	if _, rt := pol.Route(unroutedMethod, path); rt != post {
		return true
	}
	for i := range pol.Routes {
		if m := pol.Routes[i].Method; m != "*" {
			if _, rt := pol.Route(m, path); rt != post {
				return true
			}
		}
	}
	return false
}

// formKind returns the media type of a form content type, "" for any
// other.
func formKind(contentType string) string {
	switch mt, _, _ := mime.ParseMediaType(contentType); mt {
	case "application/x-www-form-urlencoded", "multipart/form-data":
		return mt
	}
	return ""
}

// bodyOverride checks the _method fields of a POST's form body read whole
// (the account's body), as formOverride and multipartField read them.
func bodyOverride(pol *policy.Policy, path string, body []byte, contentType string) *apiError {
	mt, params, _ := mime.ParseMediaType(contentType)
	if mt == "application/x-www-form-urlencoded" {
		return formOverride(pol, http.MethodPost, path, strings.ReplaceAll(string(body), ";", "&"), "body")
	}
	return multipartOverride(pol, path, bytes.NewReader(body), params["boundary"])
}

// multipartOverride checks the _method parts of a multipart body, read
// with mime/multipart up to its first error, as multipartField reads the
// account. Only the first 64 bytes of such a part are read: a longer one
// names no method.
func multipartOverride(pol *policy.Policy, path string, body io.Reader, boundary string) *apiError {
	if boundary == "" {
		return nil
	}
	mr := multipart.NewReader(body, boundary)
	for {
		part, err := mr.NextPart()
		if err != nil {
			return nil
		}
		if strings.EqualFold(part.FormName(), overrideField) {
			v, _ := io.ReadAll(io.LimitReader(part, 64))
			if aerr := sameRoute(pol, http.MethodPost, string(v), path, "body: field "+overrideField); aerr != nil {
				return aerr
			}
		}
	}
}

// overrideError is a body refused for its _method field while it was
// being forwarded: the upstream's request is cut short, and the client
// gets the 400.
type overrideError struct{ aerr *apiError }

func (e *overrideError) Error() string { return e.aerr.message }

// bodyScanner watches a form body on its way to the upstream for a
// _method field routed otherwise than POST (a body is forwarded as it
// arrives, so its fields are not known when the request is decided).
type bodyScanner interface {
	// feed scans the next bytes of the body.
	feed(p []byte) error
	// end is called at the body's end: a field it ends is checked.
	end() error
	// stop releases the scanner of a body not read to its end.
	stop()
}

// newBodyScanner returns the scanner for a POST's form body on path.
func newBodyScanner(pol *policy.Policy, path, contentType string) bodyScanner {
	mt, params, _ := mime.ParseMediaType(contentType)
	if mt == "multipart/form-data" {
		return newMultipartScanner(pol, path, params["boundary"])
	}
	return &formScanner{pol: pol, path: path}
}

// maxOverrideName bounds the bytes of a field name or value the form
// scanner keeps: "_method" percent-encoded whole is 21 bytes, and no
// method is longer than a few.
const maxOverrideName = 64

// formScanner reads a url-encoded body's fields as they stream, split at
// "&" and ";" (Rack 2 splits at both), keeping at most maxOverrideName
// bytes of each name and of a _method field's value.
type formScanner struct {
	pol         *policy.Policy
	path        string
	name, value []byte
	long        bool // the name is longer than any spelling of _method
	inValue     bool
	match       bool // the name is _method
}

func (s *formScanner) feed(p []byte) error {
	for _, c := range p {
		switch {
		case c == '&' || c == ';':
			if err := s.end(); err != nil {
				return err
			}
		case !s.inValue && c == '=':
			s.inValue = true
			s.match = !s.long && isOverrideName(s.name)
		case !s.inValue:
			if len(s.name) < maxOverrideName {
				s.name = append(s.name, c)
			} else {
				s.long = true
			}
		case s.match && len(s.value) < maxOverrideName:
			s.value = append(s.value, c)
		}
	}
	return nil
}

// end checks the field that ends here and starts the next one.
func (s *formScanner) end() error {
	match, value := s.match, s.value
	s.name, s.value, s.long, s.inValue, s.match = s.name[:0], s.value[:0], false, false, false
	if !match {
		return nil
	}
	v, err := url.QueryUnescape(string(value))
	if err != nil {
		return nil // net/http's ParseForm drops such a field
	}
	if aerr := sameRoute(s.pol, http.MethodPost, v, s.path, "body: field "+overrideField); aerr != nil {
		return &overrideError{aerr}
	}
	return nil
}

func (s *formScanner) stop() {}

// isOverrideName reports whether a url-encoded field name is _method.
func isOverrideName(name []byte) bool {
	n, err := url.QueryUnescape(string(name))
	return err == nil && strings.EqualFold(n, overrideField)
}

// multipartScanner reads a multipart body's parts as they stream, with
// mime/multipart in a goroutine of its own fed through a pipe, as
// multipartOverride reads a body held whole.
type multipartScanner struct {
	pw   *io.PipeWriter
	done chan struct{}
	err  error // multipartOverride's answer; read once done is closed
	over bool  // the goroutine returned: feed has nothing more to do
}

// errScanned ends the pipe of a multipart scanner whose reading is done.
var errScanned = &overrideError{badRequest("scanned")}

func newMultipartScanner(pol *policy.Policy, path, boundary string) *multipartScanner {
	pr, pw := io.Pipe()
	s := &multipartScanner{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if aerr := multipartOverride(pol, path, pr, boundary); aerr != nil {
			s.err = &overrideError{aerr}
		}
		pr.CloseWithError(errScanned)
	}()
	return s
}

func (s *multipartScanner) feed(p []byte) error {
	if s.over {
		return nil
	}
	if _, err := s.pw.Write(p); err != nil {
		s.over = true
		<-s.done
		return s.err
	}
	return nil
}

func (s *multipartScanner) end() error {
	s.pw.Close()
	<-s.done
	s.over = true
	return s.err
}

func (s *multipartScanner) stop() { s.pw.CloseWithError(io.ErrUnexpectedEOF) }
