package main

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// answer encodes one RateLimitResp with status and error.
func answer(status uint64, msg string) []byte {
	var r []byte
	r = protowire.AppendTag(r, 1, protowire.VarintType)
	r = protowire.AppendVarint(r, status)
	r = protowire.AppendTag(r, 3, protowire.VarintType) // remaining: skipped
	r = protowire.AppendVarint(r, 7)
	if msg != "" {
		r = protowire.AppendTag(r, 5, protowire.BytesType)
		r = protowire.AppendString(r, msg)
	}
	return r
}

// response encodes a GetRateLimitsResp of answers.
func response(answers ...[]byte) []byte {
	var b []byte
	for _, a := range answers {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, a)
	}
	return b
}

func TestGubernatorDenied(t *testing.T) {
	ok := answer(0, "")
	for _, c := range []struct {
		name   string
		resp   []byte
		denied bool
		err    string
	}{
		{"all under", response(ok, ok, ok, ok), false, ""},
		{"one over", response(ok, answer(1, ""), ok, ok), true, ""},
		{"an error", response(ok, ok, answer(0, "pool is empty"), ok), false, "gubernator: pool is empty"},
		{"too few answers", response(ok, ok), false, "gubernator: 2 answers for 4 limits"},
		{"truncated", response(ok, ok, ok, ok)[:5], false, "unexpected EOF"},
	} {
		denied, err := gubernatorDenied(c.resp)
		if denied != c.denied || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: got %v, %v; want %v, %q", c.name, denied, err, c.denied, c.err)
		}
	}
}

// TestGubernatorRequest: the request holds the four limits in order.
func TestGubernatorRequest(t *testing.T) {
	b := gubernatorRequest("10.0.0.1", "u_1", "d_1")
	var names []string
	for len(b) > 0 {
		_, _, k := protowire.ConsumeTag(b)
		r, n := protowire.ConsumeBytes(b[k:])
		if k < 0 || n < 0 {
			t.Fatal("malformed request")
		}
		b = b[k+n:]
		_, _, k = protowire.ConsumeTag(r)
		name, _ := protowire.ConsumeString(r[k:])
		names = append(names, name)
	}
	if got := strings.Join(names, ","); got != "ip,route,user,device" {
		t.Fatalf("limits %s", got)
	}
}

func FuzzGubernatorDenied(f *testing.F) {
	f.Add(response(answer(0, ""), answer(1, ""), answer(0, ""), answer(0, "")))
	f.Add([]byte{0x0a, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = gubernatorDenied(b) })
}
