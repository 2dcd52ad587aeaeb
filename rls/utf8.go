package rls

import (
	"strings"
	"unicode/utf8"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// toValidUTF8 returns b, a message of type md in protobuf wire format,
// with every string field (at any depth) that is not UTF-8 made valid
// (each invalid byte sequence replaced by U+FFFD), and whether it made
// any; false too when b is not well formed. It is the decoder's last
// resort for a message proto.Unmarshal refuses for its strings alone and
// the plain form's decoder does not read (a descriptor `limit` override,
// a field a newer Envoy sends): such a request is decoded, its strings
// put back as sent (restoreStrings), and Map refuses a mapped value that
// is not UTF-8, where a decoding error would be a gRPC error, which
// Envoy's failure_mode_deny: false lets through. Fields md does not name
// are copied as they are.
func toValidUTF8(b []byte, md protoreflect.MessageDescriptor) ([]byte, bool) {
	out, made, ok := appendValidUTF8(make([]byte, 0, len(b)), b, md)
	if !ok {
		return nil, false
	}
	return out, made
}

// appendValidUTF8 appends b made valid to out; made reports a string made
// valid, ok false that b is not well formed.
func appendValidUTF8(out, b []byte, md protoreflect.MessageDescriptor) (_ []byte, made, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false, false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, false, false
		}
		fd := md.Fields().ByNumber(num)
		field := b[:n+m]
		b = b[n+m:]
		if fd == nil || typ != protowire.BytesType || (fd.Kind() != protoreflect.StringKind && fd.Kind() != protoreflect.MessageKind) {
			out = append(out, field...)
			continue
		}
		v, _ := protowire.ConsumeBytes(field[n:])
		if fd.Kind() == protoreflect.MessageKind {
			sub, subMade, ok := appendValidUTF8(nil, v, fd.Message())
			if !ok {
				return nil, false, false
			}
			out = protowire.AppendBytes(protowire.AppendTag(out, num, typ), sub)
			made = made || subMade
			continue
		}
		if utf8.Valid(v) {
			out = append(out, field...)
			continue
		}
		out = protowire.AppendString(protowire.AppendTag(out, num, typ), strings.ToValidUTF8(string(v), "\uFFFD"))
		made = true
	}
	return out, made, true
}

// restoreStrings puts back into m, decoded from b with its strings made
// valid (toValidUTF8), the strings of b as sent: the domain and each
// entry's key and value, the only strings a RateLimitRequest has. So Map
// judges them as it judges the plain form's: a mapped value that is not
// UTF-8 is refused naming its entry, an unmapped one is ignored, and a
// domain that is not UTF-8 is not the policy's. Each occurrence is put
// back in turn, so the last one of a field wins, as in decoding. b is
// well formed: toValidUTF8 took it apart.
func restoreStrings(b []byte, m *rlsv3.RateLimitRequest) {
	i := 0
	eachBytes(b, func(num protowire.Number, v []byte) {
		switch {
		case num == 1:
			m.Domain = string(v)
		case num == 2 && i < len(m.Descriptors):
			restoreDescriptor(v, m.Descriptors[i])
			i++
		}
	})
}

// restoreDescriptor is restoreStrings for one descriptor's entries.
func restoreDescriptor(b []byte, d *commonv3.RateLimitDescriptor) {
	j := 0
	eachBytes(b, func(num protowire.Number, v []byte) {
		if num != 1 || j >= len(d.Entries) {
			return
		}
		e := d.Entries[j]
		j++
		eachBytes(v, func(num protowire.Number, v []byte) {
			switch num {
			case 1:
				e.Key = string(v)
			case 2:
				e.Value = string(v)
			}
		})
	})
}

// eachBytes calls f with each length-delimited field of the message b, in
// order; it stops at the first malformed field.
func eachBytes(b []byte, f func(protowire.Number, []byte)) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return
		}
		if typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b[n : n+m])
			f(num, v)
		}
		b = b[n+m:]
	}
}
