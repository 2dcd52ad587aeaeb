package rls

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	protov2 "google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/policy"
)

// Codec returns the gRPC codec the server should run with
// (grpc.ForceServerCodecV2). Built with `-tags vtprotobuf` (as
// scripts/test and the README's build do), go-control-plane's generated
// vtprotobuf code (SizeVT, MarshalToSizedBufferVTStrict) writes the
// rate-limit response without protobuf-go's reflection; without the tag
// protobuf-go writes the same bytes. Either way the bytes go into a
// buffer of gRPC's pool (gRPC frees it once written) and the pooled
// response is given back. The rate-limit request is decoded into pooled
// storage by a decoder of its plain wire form (go-control-plane generates
// no UnmarshalVT; anything else goes to proto.Unmarshal), which keeps
// strings that are not UTF-8 (pooledRequest.unmarshal). Other messages
// (the health service's) go through gRPC's proto codec.
func (s *Server) Codec() encoding.CodecV2 { return &codec{std: encoding.GetCodecV2(proto.Name), s: s} }

type codec struct {
	std encoding.CodecV2
	s   *Server
}

// vtMessage is what go-control-plane's vtprotobuf code gives a message.
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVTStrict(dAtA []byte) (int, error)
}

// internTable is the interner of one envoy section.
type internTable struct {
	e  *policy.Envoy
	in *interner
}

func (c *codec) Name() string { return proto.Name }

func (c *codec) Marshal(v any) (mem.BufferSlice, error) {
	if p, ok := v.(*pooledResponse); ok {
		defer putResponse(p) // gRPC is done with the message once it is marshalled
		return marshalPooled(&p.msg)
	}
	if _, ok := v.(vtMessage); ok {
		if m, ok := v.(protov2.Message); ok {
			return marshalPooled(m)
		}
	}
	return c.std.Marshal(v)
}

// marshalPooled writes m (with its vtprotobuf code when it has it) into a
// buffer of gRPC's pool when m is large enough to be pooled, else into a
// slice of its own, as gRPC's proto codec does.
func marshalPooled(m protov2.Message) (mem.BufferSlice, error) {
	vt, _ := m.(vtMessage)
	var n int
	if vt != nil {
		n = vt.SizeVT()
	} else {
		n = protoMarshal.Size(m)
	}
	if mem.IsBelowBufferPoolingThreshold(n) {
		b := make([]byte, n)
		if err := encodeInto(b, m, vt); err != nil {
			return nil, fmt.Errorf("rls: marshal: %w", err)
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(n)
	if err := encodeInto((*buf)[:n], m, vt); err != nil {
		pool.Put(buf)
		return nil, fmt.Errorf("rls: marshal: %w", err)
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// encodeInto writes m into b, which is exactly m's size: with vt (m's
// vtprotobuf code) when not nil, else with protobuf-go.
func encodeInto(b []byte, m protov2.Message, vt vtMessage) error {
	if vt != nil {
		_, err := vt.MarshalToSizedBufferVTStrict(b)
		return err
	}
	out, err := protoMarshal.MarshalAppend(b[:0], m)
	if err == nil && len(out) != len(b) {
		return fmt.Errorf("wrote %d bytes of %d", len(out), len(b))
	}
	return err
}

// protoMarshal writes messages without vtprotobuf code (deterministic
// off, as gRPC's codec).
var protoMarshal = protov2.MarshalOptions{}

func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	p, ok := v.(*pooledRequest)
	if !ok {
		return c.std.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return p.unmarshal(buf.ReadOnlyData(), c.s.interner())
}

// interner returns the interner of the envoy section in force.
func (s *Server) interner() *interner {
	e := s.o.Policy().Envoy
	if e == nil {
		return nil
	}
	if t := s.in.Load(); t != nil && t.e == e {
		return t.in
	}
	keys := make([]string, 0, len(e.Entries))
	for k := range e.Entries {
		keys = append(keys, k)
	}
	t := &internTable{e: e, in: newInterner(e.Domain, keys)}
	s.in.Store(t)
	return t.in
}
