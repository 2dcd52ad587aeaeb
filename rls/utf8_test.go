package rls

import (
	"bytes"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// TestToValidUTF8: every string that is not UTF-8 is made valid, the
// rest of the message (a limit override, a field this build does not
// know) is kept as it was, and restoreStrings puts the strings back as
// sent.
func TestToValidUTF8(t *testing.T) {
	lim := desc("k", "MARK")
	lim.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: 3}
	b, err := proto.Marshal(req(2, desc("a", "b"), lim, desc("MARK", "x")))
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.ReplaceAll(b, []byte("MARK"), []byte{'M', 0xff, 'K', 0xc3})
	b = append(b, 0xf8, 0x06, 0x01) // field 111 (unknown), varint 1
	md := (&rlsv3.RateLimitRequest{}).ProtoReflect().Descriptor()
	v, made := toValidUTF8(b, md)
	if !made {
		t.Fatal("no string made valid")
	}
	var got rlsv3.RateLimitRequest
	if err := proto.Unmarshal(v, &got); err != nil {
		t.Fatal(err)
	}
	want := req(2, desc("a", "b"), lim, desc("M\uFFFDK\uFFFD", "x"))
	want.Descriptors[1].Entries[0].Value = "M\uFFFDK\uFFFD"
	if got.ProtoReflect().GetUnknown() == nil {
		t.Fatal("the unknown field was dropped")
	}
	got.ProtoReflect().SetUnknown(nil)
	if !proto.Equal(&got, want) {
		t.Fatalf("got %v\nwant %v", &got, want)
	}
	restoreStrings(b, &got)
	sent := string([]byte{'M', 0xff, 'K', 0xc3})
	if got.Descriptors[1].Entries[0].Value != sent || got.Descriptors[2].Entries[0].Key != sent || got.Descriptors[0].Entries[0].Value != "b" {
		t.Fatalf("restored %q", &got)
	}
	if _, made := toValidUTF8(v, md); made {
		t.Fatal("a valid message: a string made valid")
	}
	if _, made := toValidUTF8([]byte{0x12, 0x05, 0x0a}, md); made {
		t.Fatal("a malformed message: a string made valid")
	}
}
