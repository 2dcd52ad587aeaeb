package engine

import (
	"encoding/base64"
	"strings"
	"testing"
)

// FuzzParseLeaseID checks that a lease id is read only as a decision
// spells it: whatever parseLeaseID accepts is rebuilt, from the lease and
// the keys it returned, into exactly the id it was given (one id per
// lease, so none is released under another spelling).
func FuzzParseLeaseID(f *testing.F) {
	key := base64.RawURLEncoding.EncodeToString([]byte("{user:u1}:b:exports"))
	for _, s := range []string{"0123456789abcdef01234567." + key, "0123456789abcdef01234567." + key + "." + key,
		"0123456789abcdef01234567." + key + "\n", "0123456789ABCDEF01234567." + key, "", ".", "x.y"} {
		f.Add(s)
	}
	e := &Engine{o: Options{Prefix: "tg:"}}
	f.Fuzz(func(t *testing.T, id string) {
		lease, keys, err := e.parseLeaseID(id)
		if err != nil {
			return
		}
		parts := []string{lease}
		for _, k := range keys {
			parts = append(parts, base64.RawURLEncoding.EncodeToString([]byte(strings.TrimPrefix(k, "tg:"))))
		}
		if again := strings.Join(parts, "."); again != id {
			t.Fatalf("parseLeaseID(%q) accepted an id that is spelt %q", id, again)
		}
	})
}
