package rls

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// Codec returns the gRPC codec of the rate-limit service: gRPC's proto
// codec, except that messages go-control-plane generated vtprotobuf
// marshalling for (RateLimitResponse) are marshalled with it, without
// reflection. The wire format is the same.
func Codec() encoding.CodecV2 { return codec{std: encoding.GetCodecV2(proto.Name)} }

type codec struct{ std encoding.CodecV2 }

// vtMessage is a message with vtprotobuf's generated marshalling.
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVTStrict(dAtA []byte) (int, error)
}

func (c codec) Name() string { return proto.Name }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMessage)
	if !ok {
		return c.std.Marshal(v)
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if _, err := m.MarshalToSizedBufferVTStrict(buf); err != nil {
			return nil, fmt.Errorf("rls: marshal %T: %w", v, err)
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVTStrict((*buf)[:size]); err != nil {
		pool.Put(buf)
		return nil, fmt.Errorf("rls: marshal %T: %w", v, err)
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.std.Unmarshal(data, v) }
