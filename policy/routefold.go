package policy

import "strings"

// Route spellings (contract 7.1): "no spelling that some upstream serves
// as a route escapes that route's limits". Besides the normalisation of
// 6.4 (NormalizePath, RoutePath), route matching
//
//   - folds ASCII case in paths and methods: ASP.NET, IIS, Spring with a
//     case-insensitive matcher and most file-backed servers serve
//     /AUTH/login as /auth/login, and some stacks take "post" for POST;
//     in paths, the four non-ASCII letters that case-map to ASCII ones
//     match those too (foldedASCII): Java's equalsIgnoreCase, which
//     Spring's matchers use when they ignore case, serves /auth/logİn
//     and /to\u212Aen (a Kelvin sign) as /auth/login and /token;
//   - drops ";" path parameters from every segment, as Tomcat and Jetty
//     do (/auth/login;jsessionid=1 is /auth/login, and
//     /auth/login/..;/login is /auth/login/../login, so /auth/login);
//   - drops a fragment ("#..."), which no client sends but a gateway may
//     pass on in X-Forwarded-Uri;
//   - reads "\" as "/" (IIS, ASP.NET and some Node routers do);
//   - matches a path whose last segment ends in a format suffix (a "."
//     and 1-8 letters or digits: /auth/login.json, /auth/login.xml) both
//     as written and without the suffix, as Rails' format segment and
//     Spring's suffix pattern matching serve it. A route whose pattern
//     matches either spelling matches, so a route written for
//     /config.json still matches it.
//
// Folding only ever maps a spelling onto the route an upstream serves it
// as; the request forwarded upstream is not rewritten by it.

// FoldRoutePath returns path (the request path, already decoded as
// RoutePath decodes it) with the spellings above removed: fragment,
// backslashes, ";" parameters, repeated slashes, dot segments and a
// trailing slash. Case is kept (matching folds it) and so is a format
// suffix (matching tries both). A path that needs none of it is returned
// as is, without allocating.
func FoldRoutePath(path string) string {
	if !needsFold(path) {
		return path
	}
	if i := strings.IndexByte(path, '#'); i >= 0 {
		path = path[:i]
	}
	path = strings.ReplaceAll(path, `\`, "/")
	if strings.IndexByte(path, ';') >= 0 {
		segs := strings.Split(path, "/")
		for i, s := range segs {
			if j := strings.IndexByte(s, ';'); j >= 0 {
				segs[i] = s[:j]
			}
		}
		path = strings.Join(segs, "/")
	}
	return cleanSegments(path)
}

// needsFold reports whether FoldRoutePath would change path: it has a
// fragment, a backslash or a ";", or is not clean (repeated slashes, a
// segment starting with "." that may be a dot segment, a trailing slash,
// no leading slash).
func needsFold(path string) bool {
	if path == "" || path[0] != '/' {
		return true
	}
	for i := 0; i < len(path); i++ {
		switch path[i] {
		case '#', '\\', ';':
			return true
		case '/':
			if i+1 == len(path) {
				return i > 0 // a trailing slash ("/" itself is clean)
			}
			if n := path[i+1]; n == '/' || n == '.' {
				return true
			}
		}
	}
	return false
}

// formatSuffix returns the index of the first "." of path's last segment
// when one follows some other character of it, or -1 when there is none:
// the route is tried without the suffix from there on too, as Rails'
// format segment and Spring MVC's suffix pattern matching serve it
// ("/auth/login.*" matches "/auth/login.json", "/auth/login.json.bak"
// and "/auth/login."). A segment that starts with "." ("/.well-known")
// has none.
func formatSuffix(path string) int {
	seg := strings.LastIndexByte(path, '/') + 1
	if i := strings.IndexByte(path[seg:], '.'); i > 0 {
		return seg + i
	}
	return -1
}

// lowerASCII lower-cases an ASCII letter (route matching folds case).
func lowerASCII(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// foldedASCII returns the ASCII letter (lower case) that the letter at the
// start of s case-maps to when that letter is not ASCII, and its length in
// bytes; 0, 0 for any other start. Unicode has four: "İ" (U+0130)
// lower-cases to "i", "ı" (U+0131) and "ſ" (U+017F) upper-case to "I"
// and "S", and the Kelvin sign (U+212A) lower-cases to "k". Java's
// String.equalsIgnoreCase compares both mappings, so a case-insensitive
// Spring route takes each for its ASCII letter.
func foldedASCII(s string) (byte, int) {
	switch {
	case len(s) >= 2 && s[0] == 0xc4 && (s[1] == 0xb0 || s[1] == 0xb1):
		return 'i', 2
	case len(s) >= 2 && s[0] == 0xc5 && s[1] == 0xbf:
		return 's', 2
	case len(s) >= 3 && s[0] == 0xe2 && s[1] == 0x84 && s[2] == 0xaa:
		return 'k', 3
	}
	return 0, 0
}
