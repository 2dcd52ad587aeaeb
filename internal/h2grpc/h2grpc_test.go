package h2grpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	echoMethod  = "/test.Echo/Echo"
	blockMethod = "/test.Echo/Block"
)

// echo answers its request's bytes (a StringValue answers itself).
func echo(_ context.Context, req, buf []byte) ([]byte, error) { return append(buf, req...), nil }

// serve starts a Server with o (echo added) on a free loopback port and
// returns it and its address; it is closed at cleanup.
func serve(t testing.TB, o Options) (*Server, string) {
	t.Helper()
	if o.Methods == nil {
		o.Methods = map[string]Handler{}
	}
	o.Methods[echoMethod] = echo
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, ln.Addr().String()
}

// dial returns a grpc-go client connection to addr, closed at cleanup.
func dial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// call invokes method with a StringValue of s and returns the answer's.
func call(ctx context.Context, cc *grpc.ClientConn, method, s string, opts ...grpc.CallOption) (string, error) {
	var out wrapperspb.StringValue
	err := cc.Invoke(ctx, method, wrapperspb.String(s), &out, opts...)
	return out.GetValue(), err
}

func wantCode(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	if st, _ := status.FromError(err); st.Code() != code || !strings.Contains(st.Message(), msg) {
		t.Fatalf("got %v, want %v with %q", err, code, msg)
	}
}

// TestCallsOverTwoConnections: many concurrent calls over 2 connections
// (as Envoy sends) each get their own answer.
func TestCallsOverTwoConnections(t *testing.T) {
	t.Parallel()
	_, addr := serve(t, Options{Workers: 4})
	ccs := []*grpc.ClientConn{dial(t, addr), dial(t, addr)}
	var wg sync.WaitGroup
	errs := make(chan error, 2000)
	for i := 0; i < 2000; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			want := fmt.Sprintf("call %d %s", i, strings.Repeat("x", i%700))
			got, err := call(context.Background(), ccs[i%2], echoMethod, want)
			if err != nil || got != want {
				errs <- fmt.Errorf("call %d: %q %v", i, got, err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestStatuses: a handler's status reaches the client, its message
// percent-encoded and back; other errors are UNKNOWN; an unknown method
// is UNIMPLEMENTED.
func TestStatuses(t *testing.T) {
	t.Parallel()
	_, addr := serve(t, Options{Methods: map[string]Handler{
		"/test.Echo/Status": func(context.Context, []byte, []byte) ([]byte, error) {
			return nil, status.Error(codes.InvalidArgument, "bad: 100% \"wrong\"\n\u00e9")
		},
		"/test.Echo/Plain": func(context.Context, []byte, []byte) ([]byte, error) { return nil, errors.New("plain") },
	}})
	cc := dial(t, addr)
	_, err := call(context.Background(), cc, "/test.Echo/Status", "x")
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || st.Message() != "bad: 100% \"wrong\"\n\u00e9" {
		t.Fatalf("status: %v", err)
	}
	_, err = call(context.Background(), cc, "/test.Echo/Plain", "x")
	wantCode(t, err, codes.Unknown, "plain")
	_, err = call(context.Background(), cc, "/test.Echo/Nope", "x")
	wantCode(t, err, codes.Unimplemented, "unknown method /test.Echo/Nope")
	if got, err := call(context.Background(), cc, echoMethod, "after"); got != "after" || err != nil {
		t.Fatalf("echo after errors: %q %v", got, err)
	}
}

// TestOversizedAndCompressed: a message above MaxRecvMsgSize is
// RESOURCE_EXHAUSTED, a compressed one UNIMPLEMENTED; the connection
// serves on.
func TestOversizedAndCompressed(t *testing.T) {
	t.Parallel()
	_, addr := serve(t, Options{MaxRecvMsgSize: 1000})
	cc := dial(t, addr)
	_, err := call(context.Background(), cc, echoMethod, strings.Repeat("x", 1000))
	wantCode(t, err, codes.ResourceExhausted, "grpc: received message larger than max (1003 vs. 1000)")
	_, err = call(context.Background(), cc, echoMethod, strings.Repeat("x", 100000)) // beyond one DATA frame
	wantCode(t, err, codes.ResourceExhausted, "grpc: received message larger than max (100004 vs. 1000)")
	_, err = call(context.Background(), cc, echoMethod, "zip", grpc.UseCompressor(gzip.Name))
	wantCode(t, err, codes.Unimplemented, `grpc: Decompressor is not installed for grpc-encoding "gzip"`)
	if got, err := call(context.Background(), cc, echoMethod, strings.Repeat("y", 990)); err != nil || len(got) != 990 {
		t.Fatalf("at the bound: %d %v", len(got), err)
	}
}

// TestDeadlineAndCancel: grpc-timeout is the handler's deadline (its
// error then DEADLINE_EXCEEDED), and a client's cancellation (RST_STREAM)
// cancels the handler's context, mid-call; the connection serves on.
func TestDeadlineAndCancel(t *testing.T) {
	t.Parallel()
	seen := make(chan error, 1)
	deadlines := make(chan time.Duration, 1)
	started := make(chan struct{}, 1)
	_, addr := serve(t, Options{Methods: map[string]Handler{blockMethod: func(ctx context.Context, _, _ []byte) ([]byte, error) {
		if d, ok := ctx.Deadline(); ok {
			deadlines <- time.Until(d)
		} else {
			deadlines <- 0
		}
		started <- struct{}{}
		<-ctx.Done()
		seen <- ctx.Err()
		return nil, ctx.Err()
	}}})
	// A raw client: grpc-go's would reset the stream at its deadline.
	rc := dialRaw(t, addr)
	rc.headers(1, false, ":path", blockMethod, "grpc-timeout", "100m")
	_ = rc.fr.WriteData(1, true, message(0, nil))
	if a := rc.answer(1, 0); a.fields["grpc-status"] != "4" {
		t.Fatalf("past grpc-timeout: %v", a.fields)
	}
	if d := <-deadlines; d <= 0 || d > 100*time.Millisecond {
		t.Fatalf("handler's deadline in %v, want within 100ms", d)
	}
	<-started
	if err := <-seen; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("handler saw %v", err)
	}

	cc := dial(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	_, err := call(ctx, cc, blockMethod, "x")
	wantCode(t, err, codes.Canceled, "")
	if d := <-deadlines; d != 0 {
		t.Fatalf("a deadline without grpc-timeout: %v", d)
	}
	if err := <-seen; !errors.Is(err, context.Canceled) {
		t.Fatalf("handler saw %v", err)
	}
	if got, err := call(context.Background(), cc, echoMethod, "on"); got != "on" || err != nil {
		t.Fatalf("after the reset: %q %v", got, err)
	}
}

// TestShutdownDrains: Shutdown refuses new connections, lets the call in
// flight finish and answer, then closes; past its context it cuts the
// calls left.
func TestShutdownDrains(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	s, addr := serve(t, Options{Methods: map[string]Handler{blockMethod: func(ctx context.Context, req, buf []byte) ([]byte, error) {
		started <- struct{}{}
		select {
		case <-release:
			return append(buf, req...), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}})
	cc := dial(t, addr)
	got := make(chan error, 1)
	go func() {
		v, err := call(context.Background(), cc, blockMethod, "in flight")
		if err == nil && v != "in flight" {
			err = fmt.Errorf("answer %q", v)
		}
		got <- err
	}()
	<-started
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	waitFor(t, func() bool { _, err := net.Dial("tcp", addr); return err != nil })
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned with a call in flight: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-got; err != nil {
		t.Fatalf("call in flight: %v", err)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	s2, addr2 := serve(t, Options{Methods: map[string]Handler{blockMethod: func(ctx context.Context, _, _ []byte) ([]byte, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}}})
	go func() { _, err := call(context.Background(), dial(t, addr2), blockMethod, "x"); got <- err }()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s2.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown past its deadline: %v", err)
	}
	wantCode(t, <-got, codes.Unavailable, "")
}

// waitFor polls ok to a deadline.
func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("condition not met in 5s")
		}
	}
}

// rawClient speaks HTTP/2 by hand, for what grpc-go's client does not send.
type rawClient struct {
	t    *testing.T
	nc   net.Conn
	fr   *http2.Framer
	henc *hpack.Encoder
	hbuf bytes.Buffer
	last uint32
}

// dialRaw connects, sends the preface and settings, and reads the
// server's SETTINGS (acknowledging them).
func dialRaw(t *testing.T, addr string, settings ...http2.Setting) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	c := &rawClient{t: t, nc: nc, fr: http2.NewFramer(nc, nc)}
	c.henc = hpack.NewEncoder(&c.hbuf)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	f := c.read()
	if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
		t.Fatalf("first frame %v", f)
	}
	if err := c.fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *rawClient) read() http2.Frame {
	c.t.Helper()
	f, err := c.fr.ReadFrame()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return f
}

// headers sends a request's HEADERS, kv overriding the defaults (a
// value "" drops the field).
func (c *rawClient) headers(id uint32, end bool, kv ...string) {
	c.t.Helper()
	fields := map[string]string{":method": "POST", ":scheme": "http", ":path": echoMethod, ":authority": "x", "content-type": "application/grpc"}
	for i := 0; i+1 < len(kv); i += 2 {
		fields[kv[i]] = kv[i+1]
	}
	c.hbuf.Reset()
	for _, k := range []string{":method", ":scheme", ":path", ":authority", "content-type", "grpc-encoding", "grpc-timeout"} {
		if v := fields[k]; v != "" {
			_ = c.henc.WriteField(hpack.HeaderField{Name: k, Value: v})
		}
	}
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndStream: end, EndHeaders: true}) // after a GOAWAY it may fail
}

// message is msg in gRPC's framing, compressed flag flag.
func message(flag byte, msg []byte) []byte {
	b := []byte{flag, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// answer reads stream id's answer to its end: the header fields (the
// trailers' after the first block's) and the DATA, giving window back
// with grant (0: none) after each DATA frame.
type answer struct {
	fields map[string]string
	data   []byte
	frames []int // DATA frame sizes
	rst    http2.ErrCode
}

func (c *rawClient) answer(id uint32, grant uint32) answer {
	c.t.Helper()
	a := answer{fields: map[string]string{}, rst: ^http2.ErrCode(0)}
	for {
		switch f := c.read().(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			for _, hf := range f.Fields {
				a.fields[hf.Name] = hf.Value
			}
			if f.StreamEnded() {
				return a
			}
		case *http2.DataFrame:
			if f.StreamID != id {
				continue
			}
			a.data = append(a.data, f.Data()...)
			a.frames = append(a.frames, len(f.Data()))
			if grant > 0 {
				_ = c.fr.WriteWindowUpdate(id, grant)
				_ = c.fr.WriteWindowUpdate(0, grant)
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				a.rst = f.ErrCode
				return a
			}
		case *http2.GoAwayFrame:
			c.t.Fatalf("GOAWAY %v %q", f.ErrCode, f.DebugData())
		}
	}
}

// TestBadRequests: a method other than POST is 405, a content type
// other than gRPC's 415, a compressed message without grpc-encoding
// INTERNAL, a malformed grpc-timeout INTERNAL, a call with no message or
// two INTERNAL.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	_, addr := serve(t, Options{})
	c := dialRaw(t, addr)
	c.headers(1, true, ":method", "GET")
	if a := c.answer(1, 0); a.fields[":status"] != "405" {
		t.Fatalf("GET: %v", a)
	}
	c.headers(3, true, "content-type", "application/json")
	if a := c.answer(3, 0); a.fields[":status"] != "415" {
		t.Fatalf("json: %v", a)
	}
	for _, tc := range []struct {
		id   uint32
		kv   []string
		data []byte
		code string
		msg  string
	}{
		{5, nil, message(1, []byte("x")), "13", "grpc: compressed flag set with identity or empty encoding"},
		{7, []string{"grpc-timeout", "10x"}, message(0, nil), "13", `malformed grpc-timeout "10x"`},
		{9, nil, nil, "13", "h2grpc: the request has no complete message"},
		{11, nil, append(message(0, []byte("a")), message(0, []byte("b"))...), "13", "h2grpc: a unary request carries one message"},
		{13, []string{":path", "/x/y", "content-type", "application/grpc+proto"}, message(0, nil), "12", "unknown method /x/y"},
	} {
		c.headers(tc.id, false, tc.kv...)
		_ = c.fr.WriteData(tc.id, true, tc.data)
		a := c.answer(tc.id, 0)
		if a.fields[":status"] != "200" || a.fields["grpc-status"] != tc.code || a.fields["grpc-message"] != percentEncode(tc.msg) {
			t.Errorf("stream %d: %v", tc.id, a.fields)
		}
	}
	c.headers(15, false)
	_ = c.fr.WriteData(15, true, message(0, []byte("ok")))
	if a := c.answer(15, 0); a.fields["grpc-status"] != "0" || string(a.data) != string(message(0, []byte("ok"))) {
		t.Fatalf("a good call after the bad ones: %v %q", a.fields, a.data)
	}
}

// TestFlowControl: with the client's window at 10 bytes, the answer
// comes in DATA frames within the window as the client gives it back,
// and whole.
func TestFlowControl(t *testing.T) {
	t.Parallel()
	_, addr := serve(t, Options{})
	c := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
	msg := bytes.Repeat([]byte("0123456789abcdef"), 20) // 320 bytes
	c.headers(1, false)
	_ = c.fr.WriteData(1, true, message(0, msg))
	a := c.answer(1, 10)
	if a.fields["grpc-status"] != "0" || !bytes.Equal(a.data, message(0, msg)) {
		t.Fatalf("answer %v %d bytes", a.fields, len(a.data))
	}
	for i, n := range a.frames {
		if n > 10 {
			t.Fatalf("DATA frame %d of %d bytes, beyond the window", i, n)
		}
	}
	// A larger window set later applies to the next calls.
	_ = c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1000})
	c.headers(3, false)
	_ = c.fr.WriteData(3, true, message(0, msg))
	if a := c.answer(3, 0); len(a.frames) != 1 || !bytes.Equal(a.data, message(0, msg)) {
		t.Fatalf("with a window of 1000: frames %v", a.frames)
	}
}

// TestRefusedAndReset: beyond MaxConcurrentStreams a stream is refused;
// a client's RST_STREAM mid-call cancels the handler and frees its slot.
func TestRefusedAndReset(t *testing.T) {
	t.Parallel()
	cancelled := make(chan error, 4)
	started := make(chan struct{}, 4)
	_, addr := serve(t, Options{MaxConcurrentStreams: 2, Methods: map[string]Handler{blockMethod: func(ctx context.Context, _, _ []byte) ([]byte, error) {
		started <- struct{}{}
		<-ctx.Done()
		cancelled <- ctx.Err()
		return nil, ctx.Err()
	}}})
	c := dialRaw(t, addr)
	for _, id := range []uint32{1, 3} {
		c.headers(id, false, ":path", blockMethod)
		_ = c.fr.WriteData(id, true, message(0, nil))
		<-started
	}
	c.headers(5, false, ":path", blockMethod)
	if a := c.answer(5, 0); a.rst != http2.ErrCodeRefusedStream {
		t.Fatalf("third stream: %v", a)
	}
	_ = c.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("handler after RST_STREAM: %v", err)
	}
	waitFor(t, func() bool {
		c.headers(c.next(), false)
		_ = c.fr.WriteData(c.last, true, message(0, []byte("ok")))
		return c.answer(c.last, 0).fields["grpc-status"] == "0"
	})
}

// next and last number the client's streams after the fixed ones.
func (c *rawClient) next() uint32 {
	if c.last < 101 {
		c.last = 101
	} else {
		c.last += 2
	}
	return c.last
}

// TestCalm: pings more often than KeepaliveMinTime, and a flood of
// resets, end the connection with GOAWAY ENHANCE_YOUR_CALM.
func TestCalm(t *testing.T) {
	t.Parallel()
	_, addr := serve(t, Options{KeepaliveMinTime: time.Hour, PermitWithoutStream: true, MaxConcurrentStreams: 4})
	c := dialRaw(t, addr)
	for i := 0; i < 4; i++ {
		_ = c.fr.WritePing(false, [8]byte{byte(i)})
	}
	if ga := c.goAway(); ga.ErrCode != http2.ErrCodeEnhanceYourCalm || string(ga.DebugData()) != "too_many_pings" {
		t.Fatalf("pings: %v %q", ga.ErrCode, ga.DebugData())
	}

	c = dialRaw(t, addr)
	for id := uint32(1); id < 2*20; id += 2 {
		c.headers(id, false)
		_ = c.fr.WriteRSTStream(id, http2.ErrCodeCancel)
	}
	if ga := c.goAway(); ga.ErrCode != http2.ErrCodeEnhanceYourCalm || string(ga.DebugData()) != "too many resets" {
		t.Fatalf("resets: %v %q", ga.ErrCode, ga.DebugData())
	}
}

// goAway reads to the server's GOAWAY.
func (c *rawClient) goAway() *http2.GoAwayFrame {
	c.t.Helper()
	for {
		if ga, ok := c.read().(*http2.GoAwayFrame); ok {
			return ga
		}
	}
}

// TestHeaderLimits: a header list above MaxHeaderListSize is HTTP 431,
// and calls go on; so they do after the client's SETTINGS_HEADER_TABLE_SIZE
// (the header blocks then start with a table size update to 0).
func TestHeaderLimits(t *testing.T) {
	t.Parallel()
	_, addr := serve(t, Options{MaxHeaderListSize: 400})
	c := dialRaw(t, addr, http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0})
	c.headers(1, true, ":authority", strings.Repeat("a", 250)) // each string below the bound, the list above
	if a := c.answer(1, 0); a.fields[":status"] != "431" {
		t.Fatalf("large headers: %v", a)
	}
	c.headers(3, false)
	_ = c.fr.WriteData(3, true, message(0, []byte("ok")))
	if a := c.answer(3, 0); a.fields["grpc-status"] != "0" || string(a.data) != string(message(0, []byte("ok"))) {
		t.Fatalf("after: %v %q", a.fields, a.data)
	}
}

func TestParseTimeout(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"100m", 100 * time.Millisecond, true},
		{"20S", 20 * time.Second, true},
		{"1H", time.Hour, true},
		{"5u", 5 * time.Microsecond, true},
		{"0n", 0, true},
		{"99999999H", 1<<63 - 1, true},
		{"123456789m", 0, false},
		{"10", 0, false},
		{"m", 0, false},
		{"-1S", 0, false},
		{"1x", 0, false},
	} {
		if got, ok := parseTimeout(c.in); got != c.want || ok != c.ok {
			t.Errorf("parseTimeout(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}
