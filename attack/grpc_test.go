package attack

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/service"
)

// grpcPolicy is the attack policy with Envoy's descriptors mapped, so
// that a gRPC call is decided, not answered "unknown domain".
const grpcPolicy = attackPolicy + `envoy:
  domain: mobile-api
  entries: {remote_address: ip, user_id: user, method: endpoint_method, path: endpoint_path}
`

// withGRPC serves the rate-limit service on a free port under grpcPolicy,
// with at most maxStreams calls open per connection.
func withGRPC(t *testing.T, maxStreams int) setup {
	pol := filepath.Join(t.TempDir(), "grpc-policy.yaml")
	if err := os.WriteFile(pol, []byte(grpcPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	return func(c *service.Config) {
		c.ConfigPath, c.GRPCListen, c.GRPCMaxStreams = pol, "127.0.0.1:0", maxStreams
	}
}

// descriptor is one rate-limit descriptor of key, value pairs.
func descriptor(kv ...string) *commonv3.RateLimitDescriptor {
	r := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Entries = append(r.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return r
}

// feedCall is what Envoy sends for GET /feed by user.
func feedCall(user string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "mobile-api", HitsAddend: 1, Descriptors: []*commonv3.RateLimitDescriptor{
		descriptor("remote_address", "198.51.100.7"), descriptor("method", "GET", "path", "/feed"), descriptor("user_id", user)}}
}

// rawH2 is an HTTP/2 client connection driven frame by frame, as an
// attacker drives it: one goroutine writes (the test's), one reads.
type rawH2 struct {
	c    net.Conn
	fr   *http2.Framer
	enc  *hpack.Encoder
	hbuf bytes.Buffer
}

// dialRaw opens a connection to addr and sends the preface and settings.
func dialRaw(t *testing.T, addr string, settings ...http2.Setting) *rawH2 {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	r := &rawH2{c: c, fr: http2.NewFramer(c, c)}
	r.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	r.enc = hpack.NewEncoder(&r.hbuf)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := r.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return r
}

// headers writes a header block on stream id.
func (r *rawH2) headers(t *testing.T, id uint32, endStream bool, kv ...string) {
	t.Helper()
	r.hbuf.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		_ = r.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: r.hbuf.Bytes(), EndHeaders: true, EndStream: endStream}); err != nil {
		t.Fatal(err)
	}
}

// call writes a ShouldRateLimit call for req on stream id, as Envoy does.
func (r *rawH2) call(t *testing.T, id uint32, req *rlsv3.RateLimitRequest, contentType string) {
	t.Helper()
	r.headers(t, id, false, ":method", "POST", ":scheme", "http", ":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
		":authority", "tollgate", "content-type", contentType, "te", "trailers")
	msg, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.fr.WriteData(id, true, append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg))), msg...)); err != nil {
		t.Fatal(err)
	}
}

// streamResult is what one stream of a rawH2 connection was answered.
type streamResult struct {
	grpcStatus string // from the trailers ("" none yet)
	httpStatus string
	rst        http2.ErrCode
	reset      bool
	data       []byte
}

// rawReader records every stream's answer on r until the connection ends.
type rawReader struct {
	mu      sync.Mutex
	streams map[uint32]*streamResult
	goAway  *http2.GoAwayFrame
	err     error
}

// read starts reading r's frames; it never sends a WINDOW_UPDATE.
func (r *rawH2) read() *rawReader {
	rr := &rawReader{streams: map[uint32]*streamResult{}}
	go func() {
		for {
			f, err := r.fr.ReadFrame()
			rr.mu.Lock()
			if err != nil {
				rr.err = err
				rr.mu.Unlock()
				return
			}
			rr.record(f)
			rr.mu.Unlock()
		}
	}()
	return rr
}

func (rr *rawReader) record(f http2.Frame) {
	st := rr.streams[f.Header().StreamID]
	if st == nil && f.Header().StreamID != 0 {
		st = &streamResult{}
		rr.streams[f.Header().StreamID] = st
	}
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		for _, h := range f.Fields {
			switch h.Name {
			case ":status":
				st.httpStatus = h.Value
			case "grpc-status":
				st.grpcStatus = h.Value
			}
		}
	case *http2.DataFrame:
		st.data = append(st.data, f.Data()...)
	case *http2.RSTStreamFrame:
		st.reset, st.rst = true, f.ErrCode
	case *http2.GoAwayFrame:
		rr.goAway = f
	}
}

// result returns a copy of stream id's answer so far.
func (rr *rawReader) result(id uint32) streamResult {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if st := rr.streams[id]; st != nil {
		return *st
	}
	return streamResult{}
}

// refused counts the streams reset with REFUSED_STREAM.
func (rr *rawReader) refused() int {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	n := 0
	for _, st := range rr.streams {
		if st.reset && st.rst == http2.ErrCodeRefusedStream {
			n++
		}
	}
	return n
}

// grpcClient is Envoy's generated client on a connection of its own.
func grpcClient(t *testing.T, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// decided asserts resp is a decision of the user-read limit.
func decided(t *testing.T, resp *rlsv3.RateLimitResponse, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("normal caller: %v", err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.Statuses) != 3 || resp.Statuses[0].CurrentLimit.GetName() == "" {
		t.Fatalf("normal caller: not a decision: %v", resp)
	}
}

// TestAttackGRPCZeroWindowStarvesNoOne: clients that open calls and
// never let the server send the answers (a zero flow-control window) on
// many connections hold no decision worker: a normal caller beside them
// is answered, and one connection gets no more than --grpc-max-streams
// calls open (the rest REFUSED_STREAM).
func TestAttackGRPCZeroWindowStarvesNoOne(t *testing.T) {
	t.Parallel()
	const maxStreams, conns = 20, 20
	tg := start(t, withGRPC(t, maxStreams))
	readers := make([]*rawReader, conns)
	for i := range readers {
		r := dialRaw(t, tg.grpc, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		readers[i] = r.read()
		for s := 0; s < maxStreams+5; s++ {
			r.call(t, uint32(2*s+1), feedCall("u_stuck"), "application/grpc")
		}
	}
	for i, rr := range readers {
		eventually(t, 10*time.Second, func() string {
			if n := rr.refused(); n != 5 {
				return "connection " + strconv.Itoa(i) + ": refused " + strconv.Itoa(n) + " streams, want 5"
			}
			return ""
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := grpcClient(t, tg.grpc).ShouldRateLimit(ctx, feedCall("u_normal"))
	decided(t, resp, err)
	if code, body := do(t, "GET", tg.public+"/feed", "", from("203.0.113.9")); code != 200 {
		t.Fatalf("HTTP beside the stuck gRPC calls: %d %s", code, body)
	}
	for i, rr := range readers {
		if st := rr.result(1); len(st.data) != 0 || st.grpcStatus != "" {
			t.Fatalf("connection %d: a call answered through a zero window: %+v", i, st)
		}
	}
}

// TestAttackGRPCRefusedHeaderBlockEndsOnlyItsStream: a header block the
// server refuses (not gRPC's content type), followed by DATA on that
// stream, ends only that stream: the good calls before, beside and after
// it on the same connection are all answered.
func TestAttackGRPCRefusedHeaderBlockEndsOnlyItsStream(t *testing.T) {
	t.Parallel()
	tg := start(t, withGRPC(t, 0))
	r := dialRaw(t, tg.grpc)
	rr := r.read()
	r.call(t, 1, feedCall("u_a"), "application/grpc")
	r.call(t, 3, feedCall("u_b"), "text/plain") // refused, then its DATA
	r.call(t, 5, feedCall("u_c"), "application/grpc")
	r.headers(t, 7, false, ":method", "POST", ":scheme", "http", ":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
		":authority", "tollgate", "content-type", "application/json")
	if err := r.fr.WriteData(7, false, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := r.fr.WriteData(7, true, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	r.call(t, 9, feedCall("u_d"), "application/grpc")
	for _, id := range []uint32{1, 5, 9} {
		eventually(t, 10*time.Second, func() string {
			st := rr.result(id)
			if st.grpcStatus != "0" {
				return "stream " + strconv.Itoa(int(id)) + " not answered OK: " + describe(rr, st)
			}
			return ""
		})
		var resp rlsv3.RateLimitResponse
		st := rr.result(id)
		if len(st.data) < 5 || proto.Unmarshal(st.data[5:], &resp) != nil || len(resp.Statuses) != 3 {
			t.Fatalf("stream %d: answer %x is not a decision", id, st.data)
		}
	}
	for _, id := range []uint32{3, 7} {
		if st := rr.result(id); st.grpcStatus == "0" || st.httpStatus == "200" && st.grpcStatus == "" {
			t.Fatalf("stream %d (refused header block) answered %+v", id, st)
		}
	}
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.goAway != nil || rr.err != nil {
		t.Fatalf("the connection ended: goaway %v, read error %v", rr.goAway, rr.err)
	}
}

// describe is a stream's answer and the connection's state, for a failure.
func describe(rr *rawReader, st streamResult) string {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	msg := "status " + st.httpStatus + ", grpc-status " + st.grpcStatus
	if st.reset {
		msg += ", reset " + st.rst.String()
	}
	if rr.goAway != nil {
		msg += ", GOAWAY " + rr.goAway.ErrCode.String()
	}
	if rr.err != nil && !errors.Is(rr.err, io.EOF) {
		msg += ", read: " + rr.err.Error()
	}
	return msg
}

// TestAttackGRPCIdleConnectionClosed (7.5): a connection whose calls are
// all answered and that then sends nothing is sent GOAWAY and closed by
// the server once --grpc-idle-timeout has passed (here 300 ms; the
// keepalive ping comes only after a minute and the default is 5m, so a
// close within the test's 10 s is the flag's doing), freeing what it held.
func TestAttackGRPCIdleConnectionClosed(t *testing.T) {
	t.Parallel()
	tg := start(t, withGRPC(t, 0), func(c *service.Config) { c.GRPCIdleTimeout = 300 * time.Millisecond })
	r := dialRaw(t, tg.grpc)
	rr := r.read()
	r.call(t, 1, feedCall("u_idle"), "application/grpc")
	eventually(t, 10*time.Second, func() string {
		if st := rr.result(1); st.grpcStatus != "0" {
			return "call not answered OK: " + describe(rr, st)
		}
		return ""
	})
	eventually(t, 10*time.Second, func() string {
		rr.mu.Lock()
		defer rr.mu.Unlock()
		if rr.goAway == nil || rr.err == nil {
			return "the idle connection is still open"
		}
		return ""
	})
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.goAway.ErrCode != http2.ErrCodeNo || !errors.Is(rr.err, io.EOF) && !errors.Is(rr.err, net.ErrClosed) {
		t.Fatalf("idle connection ended with GOAWAY %v, read error %v; want GOAWAY NO_ERROR, then the close", rr.goAway.ErrCode, rr.err)
	}
}

// TestAttackGRPCStuckCallsFreedAtIdleTimeout (7.5): a client that stops
// reading (a zero window) but keeps its connection up holds calls open,
// so grpc-go never finds the connection idle; it is still recycled at
// --grpc-idle-timeout (GOAWAY) and closed a grace later (the idle timeout
// itself when shorter), which frees its stuck calls, while a normal
// caller goes on.
func TestAttackGRPCStuckCallsFreedAtIdleTimeout(t *testing.T) {
	t.Parallel()
	tg := start(t, withGRPC(t, 0), func(c *service.Config) { c.GRPCIdleTimeout = 500 * time.Millisecond })
	r := dialRaw(t, tg.grpc, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	rr := r.read()
	for s := 0; s < 10; s++ {
		r.call(t, uint32(2*s+1), feedCall("u_stuck"), "application/grpc")
	}
	eventually(t, 10*time.Second, func() string {
		rr.mu.Lock()
		defer rr.mu.Unlock()
		if rr.goAway == nil || rr.err == nil {
			return "the connection holding stuck calls is still open"
		}
		return ""
	})
	for s := 0; s < 10; s++ {
		if st := rr.result(uint32(2*s + 1)); len(st.data) != 0 || st.grpcStatus != "" {
			t.Fatalf("call %d answered through a zero window: %+v", 2*s+1, st)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := grpcClient(t, tg.grpc).ShouldRateLimit(ctx, feedCall("u_normal"))
	decided(t, resp, err)
}

// rlsCalls is the number of ShouldRateLimit calls the limiter at api has
// handled (every result), from its /metrics.
func rlsCalls(t *testing.T, api string) int {
	t.Helper()
	_, body := do(t, "GET", api+"/metrics", "", nil)
	n := 0
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, "tollgate_rls_requests_total{"); ok {
			f, err := strconv.ParseFloat(v[strings.Index(v, "} ")+2:], 64)
			if err != nil {
				t.Fatalf("metrics line %q: %v", l, err)
			}
			n += int(f)
		}
	}
	return n
}

// TestAttackGRPCZeroWindowHoldsNoGoroutine (7.5): the calls of clients
// that never let the server send (a zero window), --grpc-max-streams on
// each of many connections, are all decided, and then hold no goroutine
// of their own (the goroutines of the process grow by far less than one a
// call: a connection's few, the test's readers), so no deadline is left
// to a goroutine per call; when the connections close, what they held is
// freed: the goroutines serving gRPC connections are back to the warm
// connection's. Not parallel: the counts are the process's.
func TestAttackGRPCZeroWindowHoldsNoGoroutine(t *testing.T) {
	const maxStreams, conns = 20, 20
	tg := start(t, withGRPC(t, maxStreams))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := grpcClient(t, tg.grpc).ShouldRateLimit(ctx, feedCall("u_warm"))
	decided(t, resp, err)
	calls := rlsCalls(t, tg.api) // its HTTP connection is open before the count
	before := runtime.NumGoroutine()
	transports, _ := serverTransports()
	raws := make([]*rawH2, conns)
	for i := range raws {
		raws[i] = dialRaw(t, tg.grpc, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		raws[i].read()
		for s := 0; s < maxStreams; s++ {
			raws[i].call(t, uint32(2*s+1), feedCall("u_stuck"+strconv.Itoa(s)), "application/grpc")
		}
	}
	eventually(t, 20*time.Second, func() string {
		if n := rlsCalls(t, tg.api) - calls; n < conns*maxStreams {
			return strconv.Itoa(n) + " of the stuck calls decided"
		}
		return ""
	})
	eventually(t, 10*time.Second, func() string {
		if g := runtime.NumGoroutine() - before; g >= conns*maxStreams/2 {
			return strconv.Itoa(g) + " more goroutines for " + strconv.Itoa(conns*maxStreams) + " stuck calls"
		}
		return ""
	})
	stuck, _ := serverTransports()
	t.Logf("%d stuck calls on %d connections: %d goroutines more than before, %d of them serving the connections", conns*maxStreams, conns, runtime.NumGoroutine()-before, stuck-transports)
	if stuck < transports+conns {
		t.Fatalf("%d goroutines serving gRPC connections with %d open, %d before: the count misses them", stuck, conns, transports)
	}
	for _, r := range raws {
		_ = r.c.Close()
	}
	eventually(t, 10*time.Second, func() string {
		if g, held := serverTransports(); g > transports {
			return strconv.Itoa(g-transports) + " more goroutines of gRPC server connections than before, the stuck connections closed:\n" + held
		}
		return ""
	})
}

// serverTransports counts the goroutines of the process that serve gRPC
// connections (grpc-go's server transport: a connection's reader, writer
// and keepalive) and returns their stacks. Unlike runtime.NumGoroutine it
// is not moved by the goroutines of other tests winding down.
func serverTransports() (int, string) {
	var held strings.Builder
	n := 0
	for _, g := range testenv.GoroutineStacks() {
		if strings.Contains(g, "grpc/internal/transport.(*http2Server)") || strings.Contains(g, "grpc/internal/transport.NewServerTransport") {
			n++
			held.WriteString(g + "\n\n")
		}
	}
	return n, held.String()
}

// TestAttackGRPCMaxStreamsDefault (7.5): without --grpc-max-streams a
// connection holds at most 100 calls open (the default --help and the
// docs give): of 105 calls a zero-window client opens, 5 are refused.
func TestAttackGRPCMaxStreamsDefault(t *testing.T) {
	t.Parallel()
	tg := start(t, withGRPC(t, 0))
	r := dialRaw(t, tg.grpc, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	rr := r.read()
	for s := 0; s < service.DefaultGRPCMaxStreams+5; s++ {
		r.call(t, uint32(2*s+1), feedCall("u_default"), "application/grpc")
	}
	eventually(t, 10*time.Second, func() string {
		if n := rr.refused(); n != 5 {
			return "refused " + strconv.Itoa(n) + " streams, want 5"
		}
		return ""
	})
	if service.DefaultGRPCMaxStreams != 100 {
		t.Fatalf("default --grpc-max-streams %d, the contract says 100", service.DefaultGRPCMaxStreams)
	}
}
