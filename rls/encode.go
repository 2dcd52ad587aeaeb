package rls

import (
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// appendResponse appends m in protobuf wire format to b, exactly as
// proto.Marshal would write it (fields in number order, proto3 zero
// values left out), without protobuf-go's reflection. It covers the
// fields this package sets; false means m uses another one (request
// headers, dynamic metadata, quotas, a unit multiplier, a raw header
// value), unknown fields, a nil list element or a string that is not
// UTF-8: the caller then marshals with protobuf-go (b's contents past its
// length are then undefined). FuzzAppendResponse checks the equality.
func appendResponse(b []byte, m *rlsv3.RateLimitResponse) ([]byte, bool) {
	return appendChecked(b, m, true)
}

// appendChecked is appendResponse; with checkUnknown false it does not
// look for unknown fields (protobuf-go's reflection, a third of the
// encoder's time), which a message this package built cannot have:
// nothing is ever decoded into a pooledResponse.
func appendChecked(b []byte, m *rlsv3.RateLimitResponse, checkUnknown bool) ([]byte, bool) {
	if len(m.RequestHeadersToAdd) > 0 || m.DynamicMetadata != nil || m.Quota != nil || checkUnknown && unknown(m) {
		return b, false
	}
	if m.OverallCode != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(m.OverallCode)))
	}
	var last *rlsv3.RateLimitResponse_DescriptorStatus
	size := 0
	for _, st := range m.Statuses {
		if st != last || st == nil { // the statuses of one answer are usually one message
			var ok bool
			if size, ok = statusSize(st, checkUnknown); !ok {
				return b, false
			}
			last = st
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(size))
		b = appendStatus(b, st)
	}
	for _, h := range m.ResponseHeadersToAdd {
		size, ok := headerSize(h, checkUnknown)
		if !ok {
			return b, false
		}
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(size))
		b = appendString(b, 1, h.Key)
		b = appendString(b, 2, h.Value)
	}
	if len(m.RawBody) > 0 {
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendBytes(b, m.RawBody)
	}
	return b, true
}

// responseSize is a capacity for appendResponse's output (not exact).
func responseSize(m *rlsv3.RateLimitResponse) int {
	n := 16 + 64*len(m.Statuses) + len(m.RawBody)
	for _, h := range m.ResponseHeadersToAdd {
		if h != nil {
			n += 6 + len(h.Key) + len(h.Value)
		}
	}
	return n
}

func statusSize(st *rlsv3.RateLimitResponse_DescriptorStatus, checkUnknown bool) (int, bool) {
	if st == nil || st.Quota != nil || checkUnknown && unknown(st) {
		return 0, false
	}
	n := enumSize(int32(st.Code)) + uintSize(3, uint64(st.LimitRemaining))
	if l := st.CurrentLimit; l != nil {
		if l.UnitMultiplier != nil || !utf8.ValidString(l.Name) || checkUnknown && unknown(l) {
			return 0, false
		}
		ls := limitSize(l)
		n += 1 + protowire.SizeVarint(uint64(ls)) + ls
	}
	if d := st.DurationUntilReset; d != nil {
		if checkUnknown && unknown(d) {
			return 0, false
		}
		ds := durationSize(d)
		n += 1 + protowire.SizeVarint(uint64(ds)) + ds
	}
	return n, true
}

func appendStatus(b []byte, st *rlsv3.RateLimitResponse_DescriptorStatus) []byte {
	b = appendEnum(b, 1, int32(st.Code))
	if l := st.CurrentLimit; l != nil {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(limitSize(l)))
		b = appendUint(b, 1, uint64(l.RequestsPerUnit))
		b = appendEnum(b, 2, int32(l.Unit))
		b = appendString(b, 3, l.Name)
	}
	b = appendUint(b, 3, uint64(st.LimitRemaining))
	if d := st.DurationUntilReset; d != nil {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(durationSize(d)))
		b = appendUint(b, 1, uint64(d.Seconds))
		b = appendEnum(b, 2, d.Nanos) // int32: sign-extended, as an enum
	}
	return b
}

func limitSize(l *rlsv3.RateLimitResponse_RateLimit) int {
	return uintSize(1, uint64(l.RequestsPerUnit)) + enumSize(int32(l.Unit)) + stringSize(l.Name)
}

func durationSize(d *durationpb.Duration) int {
	return uintSize(1, uint64(d.Seconds)) + enumSize(d.Nanos)
}

func headerSize(h *corev3.HeaderValue, checkUnknown bool) (int, bool) {
	if h == nil || len(h.RawValue) > 0 || checkUnknown && unknown(h) || !utf8.ValidString(h.Key) || !utf8.ValidString(h.Value) {
		return 0, false
	}
	return stringSize(h.Key) + stringSize(h.Value), true
}

// unknown reports whether m carries fields its type does not know.
func unknown(m proto.Message) bool { return len(m.ProtoReflect().GetUnknown()) > 0 }

// The helpers below are for fields numbered under 16 (a one-byte tag).

func uintSize(_ protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}

func enumSize(v int32) int { return uintSize(0, uint64(int64(v))) }

func stringSize(s string) int {
	if s == "" {
		return 0
	}
	return 1 + protowire.SizeBytes(len(s))
}

func appendUint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendEnum(b []byte, num protowire.Number, v int32) []byte {
	return appendUint(b, num, uint64(int64(v)))
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}
