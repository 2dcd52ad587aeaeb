package h2grpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
)

// BenchmarkCall is the server's cost of one call: a client that costs
// almost nothing (the calls' frames written ready-made, 16 in flight on
// one connection, the answers' frames skipped unparsed) against an echo
// handler. Its allocations are the server's.
func BenchmarkCall(b *testing.B) {
	b.Run("h2grpc", func(b *testing.B) {
		_, addr := serve(b, Options{})
		benchCall(b, addr)
	})
	b.Run("grpc-go", func(b *testing.B) { benchCall(b, serveGRPCGo(b)) })
}

// rawCodec passes messages through as bytes (*[]byte).
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// serveGRPCGo serves the echo method on grpc-go's server with the options
// the limiter had, and returns its address.
func serveGRPCGo(b *testing.B) string {
	g := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}), grpc.NumStreamWorkers(128),
		grpc.InitialWindowSize(1<<20), grpc.InitialConnWindowSize(1<<20), grpc.MaxConcurrentStreams(1024))
	g.RegisterService(&grpc.ServiceDesc{ServiceName: "test.Echo", HandlerType: (*any)(nil), Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var m []byte
			if err := dec(&m); err != nil {
				return nil, err
			}
			return &m, nil
		}}}}, struct{}{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	b.Cleanup(g.Stop)
	return ln.Addr().String()
}

func benchCall(b *testing.B, addr string) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	var hs bytes.Buffer
	hs.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&hs, nil)
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
	_ = fr.WriteWindowUpdate(0, 1<<30)
	if _, err := nc.Write(hs.Bytes()); err != nil {
		b.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	field := func(k, v string) { _ = enc.WriteField(hpack.HeaderField{Name: k, Value: v}) }
	msg := message(0, bytes.Repeat([]byte{'x'}, 180)) // about a RateLimitRequest's size
	// call i's frames; the header block is the same after the first (indexed)
	frames := func(id uint32) []byte {
		hb.Reset()
		field(":method", "POST")
		field(":scheme", "http")
		field(":path", echoMethod)
		field(":authority", "tollgate")
		field("content-type", "application/grpc")
		field("te", "trailers")
		var out bytes.Buffer
		f := http2.NewFramer(&out, nil)
		_ = f.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true})
		_ = f.WriteData(id, true, msg)
		return out.Bytes()
	}
	const inflight = 16
	answered := make(chan struct{}, inflight)
	go func() { // counts the answers' trailers (HEADERS with END_STREAM)
		r := bufio.NewReaderSize(nc, 64<<10)
		var h [9]byte
		for {
			if _, err := io.ReadFull(r, h[:]); err != nil {
				return
			}
			n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
			if _, err := r.Discard(n); err != nil {
				return
			}
			if http2.FrameType(h[3]) == http2.FrameHeaders && h[4]&byte(http2.FlagHeadersEndStream) != 0 {
				answered <- struct{}{}
			}
		}
	}()
	first := frames(1)
	next := frames(3) // indexed headers from here on
	send := func(id uint32) {
		p := next
		if id == 1 {
			p = first
		} else {
			binary.BigEndian.PutUint32(p[5:9], id)
			hl := int(p[0])<<16 | int(p[1])<<8 | int(p[2])
			binary.BigEndian.PutUint32(p[9+hl+5:9+hl+9], id)
		}
		if _, err := nc.Write(p); err != nil {
			b.Error(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	id := uint32(1)
	for i := 0; i < b.N; i++ {
		if i >= inflight {
			<-answered
		}
		send(id)
		id += 2
	}
	for i := 0; i < min(b.N, inflight); i++ {
		<-answered
	}
}
