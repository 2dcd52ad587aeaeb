package rls

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// toValidUTF8 returns b, a message of type md in protobuf wire format,
// with every string field (at any depth) that is not UTF-8 made valid
// (each invalid byte sequence replaced by U+FFFD), and where the first
// of them is ("descriptors[3].entries[0].value"); "" when every string
// is UTF-8 or b is not well formed. It is the decoder's last resort for a
// message proto.Unmarshal refuses for its strings alone and the plain
// form's decoder does not read (a descriptor `limit` override, a field a
// newer Envoy sends): such a request is decoded and denied, where a
// decoding error would be a gRPC error, which Envoy's failure_mode_deny:
// false lets through. Fields md does not name are copied as they are.
func toValidUTF8(b []byte, md protoreflect.MessageDescriptor) ([]byte, string) {
	out, where, ok := appendValidUTF8(make([]byte, 0, len(b)), b, md, "")
	if !ok {
		return nil, ""
	}
	return out, where
}

// appendValidUTF8 appends b made valid to out; where is the first invalid
// string's path (prefix names the message b is), ok false if b is not
// well formed.
func appendValidUTF8(out, b []byte, md protoreflect.MessageDescriptor, prefix string) (_ []byte, where string, ok bool) {
	seen := map[protowire.Number]int{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, "", false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, "", false
		}
		fd := md.Fields().ByNumber(num)
		field, rest := b[:n+m], b[n+m:]
		b = rest
		if fd == nil || typ != protowire.BytesType || (fd.Kind() != protoreflect.StringKind && fd.Kind() != protoreflect.MessageKind) {
			out = append(out, field...)
			continue
		}
		v, _ := protowire.ConsumeBytes(field[n:])
		path := fieldPath(prefix, fd, seen[num])
		seen[num]++
		if fd.Kind() == protoreflect.MessageKind {
			sub, w, ok := appendValidUTF8(nil, v, fd.Message(), path)
			if !ok {
				return nil, "", false
			}
			out = protowire.AppendBytes(protowire.AppendTag(out, num, typ), sub)
			where = first(where, w)
			continue
		}
		if utf8.Valid(v) {
			out = append(out, field...)
			continue
		}
		out = protowire.AppendString(protowire.AppendTag(out, num, typ), strings.ToValidUTF8(string(v), "\uFFFD"))
		where = first(where, path)
	}
	return out, where, true
}

// fieldPath names the i-th occurrence of fd inside the message prefix.
func fieldPath(prefix string, fd protoreflect.FieldDescriptor, i int) string {
	p := string(fd.Name())
	if prefix != "" {
		p = prefix + "." + p
	}
	if fd.Cardinality() == protoreflect.Repeated {
		p = fmt.Sprintf("%s[%d]", p, i)
	}
	return p
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
