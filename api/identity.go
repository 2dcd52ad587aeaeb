package api

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/unicode"
	"golang.org/x/text/encoding/unicode/utf32"

	"github.com/tollgate-dev/tollgate/policy"
)

// identityHeaders are the headers that say who a proxied request is; each
// may be given at most once (6.4). A new identity header is one more entry.
func identityHeaders(ident *policy.Identity) []string {
	return []string{ident.UserHeader, ident.UserSignatureHeader, ident.DeviceHeader, deviceTokenHeader(ident), ident.AccountHeader}
}

// deviceTokenHeader is the header of the device token (6.3).
func deviceTokenHeader(ident *policy.Identity) string {
	if ident.DeviceTokenHeader == "" {
		return policy.DefaultDeviceTokenHeader
	}
	return ident.DeviceTokenHeader
}

// sameHeaderName reports whether two header names are one to an upstream:
// equal ignoring case, with '_' and '-' alike (CGI, WSGI and Rack turn
// both into '_', so X_User_Id is X-User-Id there).
func sameHeaderName(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x == '_' {
			x = '-'
		}
		if y == '_' {
			y = '-'
		}
		if x != y && lower(x) != lower(y) {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// headerValue returns the value of header name in any spelling an upstream
// takes for it (see sameHeaderName) and how many values there are; ""
// when there is none. An empty name has none.
func headerValue(h http.Header, name string) (string, int) {
	if name == "" {
		return "", 0
	}
	var v string
	n := 0
	for k, vs := range h {
		if sameHeaderName(k, name) {
			if n == 0 && len(vs) > 0 {
				v = vs[0]
			}
			n += len(vs)
		}
	}
	return v, n
}

// deleteHeader removes header name in every spelling headerValue reads.
func deleteHeader(h http.Header, name string) {
	for k := range h {
		if sameHeaderName(k, name) {
			delete(h, k)
		}
	}
}

// accountFromBody reads the account field of a login the way the
// upstream would (6.4): a JSON object's top-level keys (in any encoding
// jsonUTF8 reads) match field as encoding/json matches struct fields,
// case-insensitively with Unicode simple folding (escaped keys decoded); an
// application/x-www-form-urlencoded or multipart/form-data body's field
// names likewise, and the query string's, which many frameworks merge
// with the body (Go's FormValue, Rails' params, Laravel's input(),
// Spring's @RequestParam), read split at ";" as well as "&". A field given
// more than once, in any spelling or place, is a 400; a login with none,
// or whose field is not a string, has no account.
func accountFromBody(body []byte, contentType, rawQuery string, fields []string) (string, *apiError) {
	var acct string
	n := 0
	if t := bytes.TrimLeft(jsonUTF8(body), " \t\r\n"); len(t) > 0 && t[0] == '{' {
		n, acct = jsonField(t, fields)
	}
	switch mt, params, _ := mime.ParseMediaType(contentType); mt {
	case "application/x-www-form-urlencoded":
		n, acct = formField(string(body), fields, n, acct)
	case "multipart/form-data":
		n, acct = multipartField(body, params["boundary"], fields, n, acct)
	}
	// a ";" separates the query's fields too, as Traefik's proxy forwards
	// it (turned into "&"), and Rack 2 and older Python parse it; Go's
	// ParseQuery would skip the field after one
	n, acct = formField(strings.ReplaceAll(rawQuery, ";", "&"), fields, n, acct)
	if n > 1 && len(fields) == 1 {
		return "", badRequest(fmt.Sprintf("body: field %q is given more than once (in some spelling, in the body or the query string); send it once", fields[0]))
	}
	if n > 1 {
		return "", badRequest(fmt.Sprintf("body: the fields %s name the account more than once (in some spelling, in the body or the query string); send one of them once", quoteList(fields)))
	}
	return acct, nil
}

// jsonUTF8 returns a JSON body in UTF-8, read as Jackson (Spring) and
// ASP.NET Core read one (RFC 4627's detection): a byte order mark, else
// the zero bytes of its first characters (JSON starts with ASCII), say
// UTF-16 or UTF-32 and the byte order; a UTF-8 BOM is dropped. A body in
// UTF-8 is returned as it is; a decoded one is at most 1.5 times as long.
func jsonUTF8(b []byte) []byte {
	var enc encoding.Encoding
	switch {
	case bytes.HasPrefix(b, []byte{0xEF, 0xBB, 0xBF}):
		return b[3:]
	case bytes.HasPrefix(b, []byte{0, 0, 0xFE, 0xFF}):
		enc = utf32.UTF32(utf32.BigEndian, utf32.ExpectBOM)
	case bytes.HasPrefix(b, []byte{0xFF, 0xFE, 0, 0}):
		enc = utf32.UTF32(utf32.LittleEndian, utf32.ExpectBOM)
	case bytes.HasPrefix(b, []byte{0xFE, 0xFF}):
		enc = unicode.UTF16(unicode.BigEndian, unicode.ExpectBOM)
	case bytes.HasPrefix(b, []byte{0xFF, 0xFE}):
		enc = unicode.UTF16(unicode.LittleEndian, unicode.ExpectBOM)
	case len(b) >= 4 && b[0] == 0 && b[1] == 0 && b[2] == 0:
		enc = utf32.UTF32(utf32.BigEndian, utf32.IgnoreBOM)
	case len(b) >= 4 && b[1] == 0 && b[2] == 0 && b[3] == 0:
		enc = utf32.UTF32(utf32.LittleEndian, utf32.IgnoreBOM)
	case len(b) >= 2 && b[0] == 0:
		enc = unicode.UTF16(unicode.BigEndian, unicode.IgnoreBOM)
	case len(b) >= 2 && b[1] == 0:
		enc = unicode.UTF16(unicode.LittleEndian, unicode.IgnoreBOM)
	default:
		return b
	}
	out, err := enc.NewDecoder().Bytes(b)
	if err != nil {
		return b
	}
	return out
}

// decodedBody returns a login body as the upstream reads it when it
// decompresses request bodies (Apache's DEFLATE input filter, ASP.NET
// Core's request decompression, a servlet filter): the codings of
// Content-Encoding undone, last first, gzip (x-gzip) and deflate (zlib,
// or raw as some clients send it), at most MaxBody bytes of the result.
// Another coding is 415: the limiter cannot read the account in it, and
// an upstream that could would take guesses no account limit counted.
func decodedBody(body []byte, encodings []string) ([]byte, *apiError) {
	codings := contentCodings(encodings)
	for i := len(codings) - 1; i >= 0; i-- {
		var zr io.Reader
		var err error
		switch c := strings.ToLower(codings[i]); c {
		case "gzip", "x-gzip":
			zr, err = gzip.NewReader(bytes.NewReader(body))
		case "deflate":
			if zr, err = zlib.NewReader(bytes.NewReader(body)); err != nil {
				zr, err = flate.NewReader(bytes.NewReader(body)), nil
			}
		default:
			return nil, &apiError{status: http.StatusUnsupportedMediaType, code: CodeUnsupportedMedia,
				message: "header Content-Encoding: " + quoteClip(c) + " is not read on a route whose body names the account; send the body uncompressed, in gzip or in deflate"}
		}
		if err == nil {
			body, err = io.ReadAll(io.LimitReader(zr, MaxBody+1))
		}
		if err != nil {
			return nil, badRequest("body: Content-Encoding " + codings[i] + ": " + err.Error())
		}
		if len(body) > MaxBody {
			return nil, &apiError{status: http.StatusRequestEntityTooLarge, code: CodePayloadTooLarge, message: "body is larger than 64 KiB decompressed"}
		}
	}
	return body, nil
}

// contentCodings returns the codings of a request's Content-Encoding
// values, in the order they were applied; "identity" is none.
func contentCodings(values []string) []string {
	codings := strings.FieldsFunc(strings.Join(values, ","), func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
	return slices.DeleteFunc(codings, func(c string) bool { return strings.EqualFold(c, "identity") })
}

// formField adds the keys of the url-encoded form that match field
// (case-insensitively) to n, and returns the account: acct when one was
// found before, else the first value.
func formField(form string, fields []string, n int, acct string) (int, string) {
	if form == "" {
		return n, acct
	}
	vals, _ := url.ParseQuery(form) // what parsed, as net/http's ParseForm keeps it
	for k, vs := range vals {
		if formName(k, fields) {
			if n == 0 && len(vs) > 0 {
				acct = vs[0]
			}
			n += len(vs)
		}
	}
	return n, acct
}

// formName reports whether a form field's name is field: equal ignoring
// case, also when written as an array, field[] or field[N], which Rails,
// PHP and Express's qs read as a list holding the value (and Rails'
// find_by(email: params[:email]) finds the account by it), or nested,
// user[field] (Devise's user[email], as JSON's nested objects).
func formName(name string, fields []string) bool {
	if isField(name, fields) {
		return true // a field whose own name has brackets
	}
	if i := strings.LastIndexByte(name, '['); i > 0 && name[len(name)-1] == ']' && digits(name[i+1:len(name)-1]) {
		name = name[:i]
	}
	if i := strings.LastIndexByte(name, '['); i > 0 && name[len(name)-1] == ']' {
		name = name[i+1 : len(name)-1]
	}
	return isField(name, fields)
}

// isField reports whether name is one of fields, ignoring case as
// encoding/json matches struct fields.
func isField(name string, fields []string) bool {
	for _, f := range fields {
		if strings.EqualFold(name, f) {
			return true
		}
	}
	return false
}

// quoteList quotes fields and joins them with commas and "and".
func quoteList(fields []string) string {
	q := make([]string, len(fields))
	for i, f := range fields {
		q[i] = strconv.Quote(f)
	}
	if len(q) < 2 {
		return strings.Join(q, "")
	}
	return strings.Join(q[:len(q)-1], ", ") + " and " + q[len(q)-1]
}

// digits reports whether s is only ASCII digits ("" is).
func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// multipartField adds the parts of a multipart/form-data body whose
// field name matches field (case-insensitively) to n, as formField does
// for a url-encoded form, and returns the account: acct when one was
// found before, else the first such part's content. The parts are read
// with mime/multipart, as Go's ParseMultipartForm reads them (names in
// RFC 2231 form, quoted-printable parts decoded), up to the first error:
// a laxer parser may still take the fields before it. A part with a file
// name counts too, whatever the upstream makes of it.
func multipartField(body []byte, boundary string, fields []string, n int, acct string) (int, string) {
	if boundary == "" {
		return n, acct
	}
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	for {
		part, err := mr.NextPart()
		if err != nil {
			return n, acct
		}
		if formName(part.FormName(), fields) {
			if n++; n == 1 {
				v, _ := io.ReadAll(part) // within the body, at most MaxBody
				acct = string(v)
			}
		}
	}
}

// jsonField counts the keys of a JSON object that match field as
// encoding/json matches them, at the top level or in an object nested in
// it at any depth (Devise reads params[:user][:email], and Rails wraps a
// top-level email into it too), and returns the first one's account
// (jsonAccount). Arrays are not searched. It reads the body once, token by
// token, until the object ends or the JSON goes wrong.
func jsonField(body []byte, fields []string) (n int, value string) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return 0, ""
	}
	for depth := 1; depth > 0; {
		tok, err := dec.Token() // a key, or the end of an object
		if err != nil {
			return n, value
		}
		if tok == json.Delim('}') {
			depth--
			continue
		}
		if key, _ := tok.(string); isField(key, fields) {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return n, value
			}
			k, v, ok := jsonAccount(raw)
			if n == 0 && ok {
				value = v
			}
			n += k
			continue
		}
		switch tok, err = dec.Token(); tok { // the key's value
		case json.Delim('{'):
			depth++
		case json.Delim('['):
			if !skipArray(dec) {
				return n, value
			}
		}
		if err != nil {
			return n, value
		}
	}
	return n, value
}

// skipArray reads the rest of an array whose '[' dec has just read; false
// when the JSON goes wrong first.
func skipArray(dec *json.Decoder) bool {
	for open := 1; open > 0; {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('['), json.Delim('{'):
			open++
		case json.Delim(']'), json.Delim('}'):
			open--
		}
	}
	return true
}

// jsonAccount reads an account field's JSON value as the upstreams that
// coerce it do: a string; a number as its text (Jackson's default, a
// phone number as the login); an array as each of its values (Rails
// finds the account by an SQL IN over it), count telling how many, the
// first one the account. Another value (an object, true, null) counts
// once and names no account.
func jsonAccount(raw json.RawMessage) (count int, value string, ok bool) {
	switch c := raw[0]; {
	case c == '"':
		return 1, value, json.Unmarshal(raw, &value) == nil
	case c == '-' || c >= '0' && c <= '9':
		return 1, string(raw), true
	case c == '[':
		var vs []json.RawMessage
		if json.Unmarshal(raw, &vs) != nil || len(vs) == 0 {
			return 1, "", false
		}
		if vs[0][0] != '[' {
			_, value, ok = jsonAccount(vs[0])
		}
		return len(vs), value, ok
	}
	return 1, "", false
}

// clientBody is a proxied request's body: it records the first error
// reading it from the client, so a failure there (bad chunked encoding,
// a body that did not arrive in time) is answered as the client's
// (400, 408), not as the upstream's (502).
type clientBody struct {
	rc   io.ReadCloser
	scan bodyScanner // watches the body for a _method field (nil: none)
	mu   sync.Mutex
	err  error
}

// Read implements io.Reader. A body its scanner refuses ends in the
// scanner's error, without the bytes that carried the refused field.
func (b *clientBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if b.scan != nil && (err == nil || err == io.EOF) {
		serr := b.scan.feed(p[:n])
		if serr == nil && err == io.EOF {
			serr = b.scan.end()
		}
		if serr != nil {
			n, err = 0, serr
		}
	}
	if err != nil && err != io.EOF {
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
}

// Close implements io.Closer.
func (b *clientBody) Close() error {
	if b.scan != nil {
		b.scan.stop()
	}
	return b.rc.Close()
}

// failed returns the first error reading the client's body, or nil.
func (b *clientBody) failed() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// bodyError is the answer to a request body that could not be read: 408
// when it did not arrive in time, else 400.
func bodyError(err error) *apiError {
	if oe, ok := errors.AsType[*overrideError](err); ok {
		return oe.aerr
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return &apiError{status: http.StatusRequestTimeout, code: CodeRequestTimeout, message: "the request body did not arrive in time"}
	}
	return badRequest("malformed request body: " + err.Error())
}

// writeBodyError answers a request whose body failed (bodyError) and
// closes the connection: the rest of the body cannot be trusted. The
// write deadline is extended so the answer gets out.
func (s *Server) writeBodyError(w http.ResponseWriter, rid string, err error) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(5 * time.Second))
	w.Header().Set("Connection", "close")
	writeError(w, rid, bodyError(err))
}
