package api

import (
	"strings"
	"testing"
)

// FuzzDecodeRelease: any body decodes to a non-empty lease id (from an
// object) or a 400, never a panic.
func FuzzDecodeRelease(f *testing.F) {
	for _, s := range []string{`{"lease_id":"0123456789abcdef01234567.e3VzZXI6dTF9OmI6ZXhwb3J0cw"}`, `{}`, `{"lease_id":5}`,
		`{"lease_id":"a","x":1}`, `{"lease_id":"a"} {}`, ``, `[`, `{"lease_id":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		id, aerr := decodeRelease(body)
		if aerr != nil {
			if aerr.status != 400 || id != "" {
				t.Fatalf("error %+v with id %q", aerr, id)
			}
			return
		}
		if id == "" || !strings.Contains(string(body), "{") {
			t.Fatalf("id %q from %q", id, body)
		}
	})
}
