package attack

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"unicode/utf16"
)

// jacksonUpstream reads a login's JSON as Jackson (Spring) and ASP.NET
// Core read it: in UTF-8, UTF-16 or UTF-32, found from a byte order mark
// or the pattern of zero bytes the first characters make (RFC 4627's
// detection), a UTF-8 BOM skipped. It counts the attempts per account.
type jacksonUpstream struct {
	srv      *httptest.Server
	mu       sync.Mutex
	attempts map[string]int
}

func newJacksonUpstream(t *testing.T) *jacksonUpstream {
	return newJacksonUpstreamBehind(t, func(h http.Handler) http.Handler { return h })
}

// newJacksonUpstreamBehind is newJacksonUpstream's handler behind wrap.
func newJacksonUpstreamBehind(t *testing.T, wrap func(http.Handler) http.Handler) *jacksonUpstream {
	u := &jacksonUpstream{attempts: map[string]int{}}
	u.srv = httptest.NewServer(wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var login struct{ Username string }
		if err := json.Unmarshal(decodeJSONText(b), &login); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		u.mu.Lock()
		u.attempts[login.Username]++
		u.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
	})))
	t.Cleanup(u.srv.Close)
	return u
}

// decodeJSONText is the upstream's decoding: b as UTF-8.
func decodeJSONText(b []byte) []byte {
	units := func(n int, order binary.ByteOrder, skip int) []byte {
		b = b[skip:]
		var rs []rune
		if n == 2 {
			u16 := make([]uint16, len(b)/2)
			for i := range u16 {
				u16[i] = order.Uint16(b[2*i:])
			}
			rs = utf16.Decode(u16)
		} else {
			for i := 0; i+4 <= len(b); i += 4 {
				rs = append(rs, rune(order.Uint32(b[i:])))
			}
		}
		return []byte(string(rs))
	}
	switch {
	case bytes.HasPrefix(b, []byte{0xEF, 0xBB, 0xBF}):
		return b[3:]
	case bytes.HasPrefix(b, []byte{0, 0, 0xFE, 0xFF}):
		return units(4, binary.BigEndian, 4)
	case bytes.HasPrefix(b, []byte{0xFF, 0xFE, 0, 0}):
		return units(4, binary.LittleEndian, 4)
	case bytes.HasPrefix(b, []byte{0xFE, 0xFF}):
		return units(2, binary.BigEndian, 2)
	case bytes.HasPrefix(b, []byte{0xFF, 0xFE}):
		return units(2, binary.LittleEndian, 2)
	case len(b) >= 4 && b[0] == 0 && b[1] == 0 && b[2] == 0:
		return units(4, binary.BigEndian, 0)
	case len(b) >= 4 && b[1] == 0 && b[2] == 0 && b[3] == 0:
		return units(4, binary.LittleEndian, 0)
	case len(b) >= 2 && b[0] == 0:
		return units(2, binary.BigEndian, 0)
	case len(b) >= 2 && b[1] == 0:
		return units(2, binary.LittleEndian, 0)
	}
	return b
}

// byteOrder is a byte order that appends, as binary's two do.
type byteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

// encodeUTF16 returns s in UTF-16 of the byte order, after bom.
func encodeUTF16(s string, order byteOrder, bom bool) string {
	var out []byte
	if bom {
		out = order.AppendUint16(out, 0xFEFF)
	}
	for _, u := range utf16.Encode([]rune(s)) {
		out = order.AppendUint16(out, u)
	}
	return string(out)
}

// encodeUTF32 returns s in UTF-32 of the byte order, after bom.
func encodeUTF32(s string, order byteOrder, bom bool) string {
	var out []byte
	if bom {
		out = order.AppendUint32(out, 0xFEFF)
	}
	for _, r := range s {
		out = order.AppendUint32(out, uint32(r))
	}
	return string(out)
}

// Attack: a Spring (Jackson) or ASP.NET Core upstream reads a JSON body
// in UTF-16 or UTF-32 as well as UTF-8, and skips a UTF-8 byte order
// mark. The attacker sends each guessed login so encoded: the limiter
// found no JSON object (its first byte was not "{"), so no account, and
// login-account (5 a minute) never counted the 20 guesses the upstream
// took against the victim.
// Defence (6.4): the account is read from a JSON body in every encoding
// such an upstream reads (the BOM, or the zero bytes of the first
// characters, says which).
func TestAttackJSONEncodingHidesAccount(t *testing.T) {
	t.Parallel()
	up := newJacksonUpstream(t)
	tg := start(t, withUpstream(up.srv.URL))
	for i, c := range []struct {
		name string
		enc  func(string) string
	}{
		{"UTF-8 with a BOM", func(s string) string { return "\xEF\xBB\xBF" + s }},
		{"UTF-16LE", func(s string) string { return encodeUTF16(s, binary.LittleEndian, false) }},
		{"UTF-16BE with a BOM", func(s string) string { return encodeUTF16(s, binary.BigEndian, true) }},
		{"UTF-32LE with a BOM", func(s string) string { return encodeUTF32(s, binary.LittleEndian, true) }},
		{"UTF-32BE", func(s string) string { return encodeUTF32(s, binary.BigEndian, false) }},
	} {
		victim := fmt.Sprintf("victim-encoding-%d", i)
		for j := range 20 {
			do(t, "POST", tg.public+"/auth/login", c.enc(`{"username":"`+victim+`","password":"guess"}`),
				from(fmt.Sprintf("198.18.30.%d", 20*i+j+1), "Content-Type", "application/json"))
		}
		up.mu.Lock()
		n := up.attempts[victim]
		up.mu.Unlock()
		if n > 5 {
			t.Errorf("%s: the upstream took %d of 20 guesses at one account; want at most 5 (login-account, 5/min)", c.name, n)
		}
	}
}

// Attack: the upstream decompresses request bodies (Apache's
// SetInputFilter DEFLATE in front of PHP, ASP.NET Core's
// UseRequestDecompression, a servlet filter), and the attacker sends
// each guessed login gzip-compressed with Content-Encoding: gzip. The
// limiter read the compressed bytes, found no account, and
// login-account (5 a minute) never counted the guesses.
// Defence (6.4): on a route whose body is read for the account, a body
// in gzip or deflate is read decompressed (at most 64 KiB of it), and
// one in an encoding the limiter cannot read is refused (415).
func TestAttackCompressedLoginHidesAccount(t *testing.T) {
	t.Parallel()
	up := newJacksonUpstreamBehind(t, gunzipping)
	tg := start(t, withUpstream(up.srv.URL))
	for i, enc := range []string{"gzip", "x-gzip", "deflate"} {
		victim := fmt.Sprintf("victim-compressed-%d", i)
		for j := range 20 {
			do(t, "POST", tg.public+"/auth/login", compress(enc, `{"username":"`+victim+`","password":"guess"}`),
				from(fmt.Sprintf("198.18.31.%d", 20*i+j+1), "Content-Type", "application/json", "Content-Encoding", enc))
		}
		up.mu.Lock()
		n := up.attempts[victim]
		up.mu.Unlock()
		if n > 5 {
			t.Errorf("%s: the upstream took %d of 20 guesses at one account; want at most 5 (login-account, 5/min)", enc, n)
		}
	}
	if code, body := do(t, "POST", tg.public+"/auth/login", "(brotli)", from("198.18.31.99", "Content-Encoding", "br")); code != http.StatusUnsupportedMediaType {
		t.Errorf("a login body in br: %d %.160s; want 415", code, body)
	}
}

// gunzipping decompresses a request body in gzip or deflate (zlib) before h.
func gunzipping(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Content-Encoding") {
		case "gzip", "x-gzip":
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = zr
		case "deflate":
			zr, err := zlib.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = zr
		}
		h.ServeHTTP(w, r)
	})
}

// compress returns s in the content encoding enc.
func compress(enc, s string) string {
	var b bytes.Buffer
	var zw io.WriteCloser = gzip.NewWriter(&b)
	if enc == "deflate" {
		zw = zlib.NewWriter(&b)
	}
	_, _ = io.WriteString(zw, s)
	_ = zw.Close()
	return b.String()
}
