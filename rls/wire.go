package rls

import (
	"sync"
	"unicode/utf8"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// pooledRequest is a RateLimitRequest with the storage of its
// descriptors and entries, reused across calls (see reqPool).
type pooledRequest struct {
	msg     rlsv3.RateLimitRequest
	list    []*commonv3.RateLimitDescriptor // msg.Descriptors' storage
	descs   []*commonv3.RateLimitDescriptor // decoded descriptors' storage
	entries [][]*commonv3.RateLimitDescriptor_Entry
	used    int // descs in use
	epool   []*commonv3.RateLimitDescriptor_Entry
	eused   int
}

// ProtoReflect makes p a proto.Message (its RateLimitRequest), so that
// any gRPC codec can decode into it.
func (p *pooledRequest) ProtoReflect() protoreflect.Message { return p.msg.ProtoReflect() }

var reqPool = sync.Pool{New: func() any { return new(pooledRequest) }}

// maxPooled bounds the storage a pooled request keeps between calls.
const maxPooled = 4 * MaxDescriptors

func getRequest() *pooledRequest { return reqPool.Get().(*pooledRequest) }

func putRequest(p *pooledRequest) {
	if len(p.descs) > maxPooled || len(p.epool) > maxPooled {
		return // an unusually large request: let it go
	}
	reqPool.Put(p)
}

// reset empties p, keeping its storage.
func (p *pooledRequest) reset() {
	p.msg.Reset()
	p.msg.Descriptors = p.list[:0]
	p.used, p.eused = 0, 0
}

// unmarshal decodes b (a RateLimitRequest in protobuf wire format) into
// p.msg: the plain form Envoy sends is read directly, reusing p's
// storage and the interned strings; anything else (unknown fields, a
// descriptor `limit` override, repeated wrapper fields, invalid UTF-8,
// a malformed message) goes to proto.Unmarshal, so the result is
// proto.Unmarshal's (FuzzUnmarshalRequest checks), with two exceptions.
// A message over the bounds (MaxDescriptors, MaxEntries), which Map
// refuses, is not decoded past them (overBounds): decoded, its 64 KiB
// would take some 4 MB. And a message of the plain form whose strings
// are not all UTF-8, which proto.Unmarshal refuses, is decoded as it is. Envoy copies header
// bytes into entry values unchecked, so X-Device-Id: \xff is such a
// message, and a decoding error is a gRPC error, which Envoy answers by
// failure_mode_deny (false in the documented configuration: the request
// passes unlimited). Decoded, Map refuses the value as it refuses any
// bad value: a denial. A message of another form whose strings are not
// all UTF-8 (a descriptor `limit` override, a field a newer Envoy sends)
// is decoded with its strings made valid and then put back as sent
// (restoreStrings), so that Map judges it as it judges the plain form.
func (p *pooledRequest) unmarshal(b []byte, in *interner) error {
	p.reset()
	if p.decode(b, in, true) {
		return nil
	}
	p.reset()
	if over, at := bounds(b); over {
		// Decoded, what is over the bounds would cost some 80 bytes a
		// 2-byte entry or descriptor (64 KiB: 4 MB), for a request Map
		// refuses anyway: it gets the request Map refuses the same way.
		p.overBounds(b, at, in)
		return nil
	}
	err := proto.Unmarshal(b, &p.msg)
	if err == nil {
		return nil
	}
	p.reset()
	if p.decode(b, in, false) {
		return nil
	}
	p.reset()
	if v, made := toValidUTF8(b, p.msg.ProtoReflect().Descriptor()); made {
		if proto.Unmarshal(v, &p.msg) == nil {
			restoreStrings(b, &p.msg)
			return nil
		}
		p.reset()
	}
	return err
}

// decode is unmarshal's fast path; false means "not the plain form"
// (when strict, strings that are not UTF-8 are not the plain form).
func (p *pooledRequest) decode(b []byte, in *interner, strict bool) bool {
	m := &p.msg
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || strict && !utf8.Valid(v) {
				return false
			}
			m.Domain, b = in.str(v), b[n:]
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || len(m.Descriptors) == MaxDescriptors {
				return false
			}
			d := p.descriptor()
			if !p.decodeDescriptor(v, d, in, strict) {
				return false
			}
			m.Descriptors, b = append(m.Descriptors, d), b[n:]
			p.list = m.Descriptors
		case num == 3 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			m.HitsAddend, b = uint32(v), b[n:]
		default:
			return false
		}
	}
	return true
}

// bounds scans b, a RateLimitRequest in wire format, without decoding
// it: over is true when it has more than MaxDescriptors descriptors (at
// is then -1) or a descriptor of more than MaxEntries entries (at is the
// first one's index). A malformed b is not over: proto.Unmarshal says
// what is wrong with it.
func bounds(b []byte) (over bool, at int) {
	n, at := 0, -1
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return false, 0
		}
		b = b[l:]
		l = protowire.ConsumeFieldValue(num, typ, b)
		if l < 0 {
			return false, 0
		}
		if num == 2 && typ == protowire.BytesType {
			if v, _ := protowire.ConsumeBytes(b); at < 0 && entriesOver(v) {
				at = n
			}
			n++
		}
		b = b[l:]
	}
	switch {
	case n > MaxDescriptors:
		return true, -1
	case at >= 0:
		return true, at
	}
	return false, 0
}

// entriesOver reports whether b, a RateLimitDescriptor in wire format,
// has more than MaxEntries entries (false when it is malformed).
func entriesOver(b []byte) bool {
	n := 0
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return false
		}
		b = b[l:]
		l = protowire.ConsumeFieldValue(num, typ, b)
		if l < 0 {
			return false
		}
		if num == 1 && typ == protowire.BytesType {
			n++
		}
		b = b[l:]
	}
	return n > MaxEntries
}

// overBounds decodes into p.msg, from b over the bounds (bounds(b) said
// at), only what Map needs to refuse it as it refuses the whole request:
// the domain, and MaxDescriptors+1 empty descriptors (at -1), or at empty
// descriptors and one of MaxEntries+1 empty entries.
func (p *pooledRequest) overBounds(b []byte, at int, in *interner) {
	m := &p.msg
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			break
		}
		b = b[l:]
		if num == 1 && typ == protowire.BytesType {
			if v, n := protowire.ConsumeBytes(b); n >= 0 {
				m.Domain = in.str(v)
			}
		}
		if l = protowire.ConsumeFieldValue(num, typ, b); l < 0 {
			break
		}
		b = b[l:]
	}
	empty := p.descriptor()
	n := MaxDescriptors + 1
	if at >= 0 {
		n = at
	}
	for range n {
		m.Descriptors = append(m.Descriptors, empty)
	}
	if at >= 0 {
		d, e := p.descriptor(), p.entry()
		for range MaxEntries + 1 {
			d.Entries = append(d.Entries, e)
		}
		p.entries[p.used-1] = d.Entries
		m.Descriptors = append(m.Descriptors, d)
	}
	p.list = m.Descriptors
}

// descriptor returns an empty descriptor from p's storage.
func (p *pooledRequest) descriptor() *commonv3.RateLimitDescriptor {
	if p.used == len(p.descs) {
		p.descs = append(p.descs, new(commonv3.RateLimitDescriptor))
		p.entries = append(p.entries, nil)
	}
	d := p.descs[p.used]
	// Only this decoder ever sets the storage's fields: clearing them is a Reset.
	d.Entries, d.Limit, d.HitsAddend, d.IsNegativeHits = p.entries[p.used][:0], nil, nil, false
	p.used++
	return d
}

// decodeDescriptor decodes one RateLimitDescriptor into d.
func (p *pooledRequest) decodeDescriptor(b []byte, d *commonv3.RateLimitDescriptor, in *interner, strict bool) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || len(d.Entries) == MaxEntries {
				return false
			}
			e := p.entry()
			if !decodeEntry(v, e, in, strict) {
				return false
			}
			d.Entries, b = append(d.Entries, e), b[n:]
			p.entries[p.used-1] = d.Entries // keep the grown storage
		case num == 3 && typ == protowire.BytesType && d.HitsAddend == nil:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			h, ok := decodeUInt64Value(v)
			if !ok {
				return false
			}
			d.HitsAddend, b = h, b[n:]
		case num == 4 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			d.IsNegativeHits, b = protowire.DecodeBool(v), b[n:]
		default:
			return false
		}
	}
	return true
}

// entry returns an empty entry from p's storage.
func (p *pooledRequest) entry() *commonv3.RateLimitDescriptor_Entry {
	if p.eused == len(p.epool) {
		p.epool = append(p.epool, new(commonv3.RateLimitDescriptor_Entry))
	}
	e := p.epool[p.eused]
	e.Key, e.Value = "", ""
	p.eused++
	return e
}

func decodeEntry(b []byte, e *commonv3.RateLimitDescriptor_Entry, in *interner, strict bool) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType || (num != 1 && num != 2) {
			return false
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 || strict && !utf8.Valid(v) {
			return false
		}
		if num == 1 {
			e.Key = in.str(v)
		} else {
			e.Value = in.str(v)
		}
		b = b[n:]
	}
	return true
}

// decodeUInt64Value decodes a google.protobuf.UInt64Value.
func decodeUInt64Value(b []byte) (*wrapperspb.UInt64Value, bool) {
	var x uint64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != 1 || typ != protowire.VarintType {
			return nil, false
		}
		b = b[n:]
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return nil, false
		}
		x, b = v, b[n:]
	}
	return wrapperspb.UInt64(x), true
}

// interner turns the strings every request repeats (the domain, entry
// keys, methods) into shared strings instead of new allocations.
type interner struct{ known map[string]string }

// newInterner interns the strings of the envoy section and the methods.
func newInterner(domain string, keys []string) *interner {
	in := &interner{known: map[string]string{domain: domain}}
	for _, k := range keys {
		in.known[k] = k
	}
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
		in.known[m] = m
	}
	return in
}

func (in *interner) str(b []byte) string {
	if in != nil {
		if s, ok := in.known[string(b)]; ok { // no allocation for the lookup
			return s
		}
	}
	return string(b)
}
