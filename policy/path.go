package policy

import (
	"net/url"
	"strings"
)

// NormalizePath returns an escaped URL path as an upstream sees it (6.4):
// percent-encoded unreserved characters decoded (%6c is l) and the other
// escapes upper-cased, repeated slashes merged, dot segments removed and a
// trailing slash dropped. "/auth/login/", "//auth/./login" and
// "/auth/%6cogin" all become "/auth/login". The result is escaped too
// (an encoded slash stays %2F, a stray "%" becomes %25); "" and paths
// without a leading slash are treated as rooted.
func NormalizePath(escaped string) string {
	var b strings.Builder
	b.Grow(len(escaped))
	for i := 0; i < len(escaped); i++ {
		c := escaped[i]
		if c == '%' && i+2 < len(escaped) && ishex(escaped[i+1]) && ishex(escaped[i+2]) {
			d := unhex(escaped[i+1])<<4 | unhex(escaped[i+2])
			if unreserved(d) {
				b.WriteByte(d)
			} else {
				b.WriteString("%" + strings.ToUpper(escaped[i+1:i+3]))
			}
			i += 2
			continue
		}
		if c == '%' {
			b.WriteString("%25") // a stray percent sign is a literal one
			continue
		}
		b.WriteByte(c)
	}
	return cleanSegments(b.String())
}

// RoutePath is the path route matching sees for an escaped path: the
// decoded NormalizePath, cleaned again in case decoding made segments
// (an encoded slash); matching on it is never more lenient than an
// upstream that decodes %2F.
func RoutePath(escaped string) string {
	n := NormalizePath(escaped)
	if !strings.Contains(n, "%") {
		return n
	}
	p, err := url.PathUnescape(n)
	if err != nil {
		return n
	}
	return cleanSegments(p)
}

// cleanSegments merges repeated slashes, removes "." and ".." segments
// (".." above the root stays at the root) and drops a trailing slash.
func cleanSegments(p string) string {
	segs := make([]string, 0, strings.Count(p, "/")+1)
	for _, s := range strings.Split(p, "/") {
		switch s {
		case "", ".":
		case "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
		default:
			segs = append(segs, s)
		}
	}
	return "/" + strings.Join(segs, "/")
}

// unreserved reports whether c is an RFC 3986 unreserved character.
func unreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func ishex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}
