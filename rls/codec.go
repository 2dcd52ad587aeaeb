package rls

import (
	"context"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	protov2 "google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/policy"
)

// Codec returns the gRPC codec the server should run with
// (grpc.ForceServerCodecV2): gRPC's proto codec, except that the rate-limit
// service's request is decoded into pooled storage by a decoder of its
// plain wire form (anything else goes to proto.Unmarshal), and its
// pooled response is given back once marshalled. Other messages (the
// health service's) go through gRPC's codec alone. The wire format is
// protobuf's either way.
func (s *Server) Codec() encoding.CodecV2 { return &codec{std: encoding.GetCodecV2(proto.Name), s: s} }

type codec struct {
	std encoding.CodecV2
	s   *Server
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
		if data, ok := marshalResponse(&p.msg, false); ok {
			return data, nil
		}
		return c.std.Marshal(&p.msg)
	}
	return c.std.Marshal(v)
}

// marshalResponse writes m with appendResponse into a buffer of gRPC's
// pool (gRPC frees it once written); false: use protobuf-go. checkUnknown
// false is for a message this package built (see appendChecked).
func marshalResponse(m *rlsv3.RateLimitResponse, checkUnknown bool) (mem.BufferSlice, bool) {
	pool := mem.DefaultBufferPool()
	buf := pool.Get(responseSize(m))
	out, ok := appendChecked((*buf)[:0], m, checkUnknown)
	switch {
	case !ok:
		pool.Put(buf)
		return nil, false
	case cap(out) != cap(*buf): // outgrew the estimate: a buffer of its own
		pool.Put(buf)
		return mem.BufferSlice{mem.SliceBuffer(out)}, true
	}
	*buf = out
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, true
}

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

// Handle is ShouldRateLimit for a transport that hands over the wire
// bytes of the request (internal/h2grpc's Handler): it decodes req with
// the fast decoder into a pooled message, decides as ShouldRateLimit
// does, and appends the answer's wire bytes to buf. A request that does
// not decode is INTERNAL, as with grpc-go.
func (s *Server) Handle(ctx context.Context, req, buf []byte) ([]byte, error) {
	p := getRequest()
	defer putRequest(p)
	if err := p.unmarshal(req, s.interner()); err != nil {
		return nil, status.Errorf(codes.Internal, "grpc: error unmarshalling request: %v", err)
	}
	r, err := s.shouldRateLimit(ctx, &p.msg)
	if err != nil {
		return nil, err
	}
	defer putResponse(r)
	if out, ok := appendChecked(buf, &r.msg, false); ok {
		return out, nil
	}
	return protoMarshal.MarshalAppend(buf, &r.msg)
}

var protoMarshal = protov2.MarshalOptions{}
