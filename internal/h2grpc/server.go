// Package h2grpc is a lean gRPC server transport for unary methods over
// cleartext HTTP/2 with prior knowledge (h2c), as Envoy's rate-limit
// filter and grpc-go's client speak it. It exists because grpc-go's
// server transport costs the limiter about 7 µs more CPU per call than
// net/http's HTTP/1.1 server (docs/benchmarks.md, "Gateway paths"): each
// call crosses a reader, a stream worker and a writer goroutine, with
// about 40 allocations.
//
// Here a connection has one reader goroutine, which reads frames with
// golang.org/x/net/http2's Framer (headers through its hpack decoder,
// bounded by MaxHeaderListSize), validates each call and hands the
// complete request message to a worker of a small pool (the handler may
// block, on Redis for instance). The worker runs the handler and writes
// the answer itself: HEADERS, DATA (the 5-byte gRPC prefix and the
// message) and the trailers, under the connection's write lock into a
// buffered writer, flushed only when no other worker waits to write, so
// answers that finish together leave in one write. The peer's SETTINGS
// (frame size, initial window) and the send windows are respected;
// receive credit is given back as calls are taken.
//
// Only unary calls: one request message, one response message. Methods
// are looked up by full path (/package.Service/Method); an unknown path
// is UNIMPLEMENTED, a compressed message (grpc-encoding other than
// identity) UNIMPLEMENTED, a message above MaxRecvMsgSize
// RESOURCE_EXHAUSTED; grpc-timeout is the call's deadline, and the
// peer's RST_STREAM cancels the call's context.
package h2grpc

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Handler answers one unary call. req is the request message (protobuf
// wire bytes; valid only until the handler returns). The handler appends
// the response message to buf (which may already hold bytes: keep them)
// and returns the result, or an error: a gRPC status error
// (google.golang.org/grpc/status) gives the call its code and message,
// any other error is UNKNOWN with its text.
type Handler func(ctx context.Context, req []byte, buf []byte) ([]byte, error)

// Options configures a Server. Zero values take the defaults given.
type Options struct {
	// Methods maps full method paths (/package.Service/Method) to their
	// handlers (required).
	Methods map[string]Handler
	// MaxRecvMsgSize bounds a request message, in bytes (default 64 KiB).
	MaxRecvMsgSize int
	// MaxConcurrentStreams bounds the calls one connection has open
	// (default 1024); beyond, a new stream is refused (RST_STREAM
	// REFUSED_STREAM).
	MaxConcurrentStreams uint32
	// MaxHeaderListSize bounds the decoded header list of one request,
	// CONTINUATION frames included (default 16 KiB).
	MaxHeaderListSize uint32
	// Workers is the number of long-lived goroutines that run calls
	// (default 128); when all are busy a call gets a goroutine of its own.
	Workers int
	// KeepaliveMinTime is the least time a client should wait between
	// pings (default 5 min, grpc-go's); more often, three times with
	// nothing written between, closes the connection with GOAWAY
	// ENHANCE_YOUR_CALM ("too_many_pings").
	KeepaliveMinTime time.Duration
	// PermitWithoutStream allows pings on a connection without calls;
	// if false they count as too frequent.
	PermitWithoutStream bool
	// KeepaliveTime: after this long without a frame from the client the
	// server pings it (default 2 h, grpc-go's); KeepaliveTimeout later
	// (default 20 s), still without a frame, it closes the connection.
	KeepaliveTime    time.Duration
	KeepaliveTimeout time.Duration
	// Logger receives connection errors at debug level (default: discard).
	Logger *slog.Logger
	// Now is the clock of the ping and reset limits (default time.Now).
	Now func() time.Time
}

// Server serves the unary methods of Options over HTTP/2. It is safe for
// concurrent use; use New.
type Server struct {
	o       Options
	work    chan *stream
	quit    chan struct{}
	started sync.Once

	mu       sync.Mutex
	lns      map[net.Listener]struct{}
	conns    map[*conn]struct{}
	draining bool
	closed   bool
	wg       sync.WaitGroup // connections' reader goroutines
	workers  sync.WaitGroup
}

// ErrNoMethods is returned by New without a method to serve.
var ErrNoMethods = errors.New("h2grpc: no methods")

// New returns a Server for o, with o's defaults filled in.
func New(o Options) (*Server, error) {
	if len(o.Methods) == 0 {
		return nil, ErrNoMethods
	}
	if o.MaxRecvMsgSize <= 0 {
		o.MaxRecvMsgSize = 64 << 10
	}
	if o.MaxConcurrentStreams == 0 {
		o.MaxConcurrentStreams = 1024
	}
	if o.MaxHeaderListSize == 0 {
		o.MaxHeaderListSize = 16 << 10
	}
	if o.Workers <= 0 {
		o.Workers = 128
	}
	if o.KeepaliveMinTime <= 0 {
		o.KeepaliveMinTime = 5 * time.Minute
	}
	if o.KeepaliveTime <= 0 {
		o.KeepaliveTime = 2 * time.Hour
	}
	if o.KeepaliveTimeout <= 0 {
		o.KeepaliveTimeout = 20 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Server{o: o, work: make(chan *stream), quit: make(chan struct{}),
		lns: map[net.Listener]struct{}{}, conns: map[*conn]struct{}{}}, nil
}

// ErrServerClosed is returned by Serve after Close or Shutdown began.
var ErrServerClosed = errors.New("h2grpc: server closed")

// Serve accepts connections on ln and serves each until it ends, Close
// or Shutdown. It returns ErrServerClosed once they began, else the
// listener's error; ln is closed on return.
func (s *Server) Serve(ln net.Listener) error {
	s.started.Do(s.startWorkers)
	s.mu.Lock()
	if s.closed || s.draining {
		s.mu.Unlock()
		_ = ln.Close()
		return ErrServerClosed
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.lns, ln)
		s.mu.Unlock()
		_ = ln.Close()
	}()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.stopping() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		if !s.track(nc) {
			_ = nc.Close()
			return ErrServerClosed
		}
	}
}

// stopping reports whether Close or Shutdown began.
func (s *Server) stopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed || s.draining
}

// track starts serving nc; false once the server stops.
func (s *Server) track(nc net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.draining {
		return false
	}
	c := newConn(s, nc)
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		c.serve()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	return true
}

func (s *Server) startWorkers() {
	s.workers.Add(s.o.Workers)
	for i := 0; i < s.o.Workers; i++ {
		go s.worker()
	}
}

// worker runs calls until the server stops.
func (s *Server) worker() {
	defer s.workers.Done()
	for {
		select {
		case st := <-s.work:
			st.c.run(st)
		case <-s.quit:
			return
		}
	}
}

// dispatch runs st's call on an idle worker, or a goroutine of its own.
func (s *Server) dispatch(st *stream) {
	select {
	case s.work <- st:
	default:
		go st.c.run(st)
	}
}

// Close closes the listeners and every connection at once: calls in
// flight see their context cancelled and their answers are dropped.
// It returns once the connections' goroutines and the workers ended.
func (s *Server) Close() {
	s.mu.Lock()
	first := !s.closed
	s.closed = true
	for ln := range s.lns {
		_ = ln.Close()
	}
	for c := range s.conns {
		c.abort()
	}
	s.mu.Unlock()
	s.wg.Wait()
	if first {
		close(s.quit)
	}
	s.workers.Wait()
}

// Shutdown drains: it closes the listeners, sends every connection
// GOAWAY (calls it has not begun are refused, so the client retries them
// elsewhere), waits until the calls in flight are answered, then closes
// the connections. If ctx ends first it closes everything as Close does
// and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	for ln := range s.lns {
		_ = ln.Close()
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.goAway()
	}
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		if s.idle() {
			s.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			s.Close()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// idle reports whether no connection has a call in flight.
func (s *Server) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.inFlight() > 0 {
			return false
		}
	}
	return true
}
