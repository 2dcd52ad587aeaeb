package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults of UpstreamTransport's zero fields, and the lean path's bounds.
const (
	defaultMaxIdlePerHost         = 256
	defaultIdleTimeout            = 90 * time.Second
	defaultResponseHeaderTimeout  = 60 * time.Second
	defaultMaxResponseHeaderBytes = 10 << 20 // as net/http's Transport
	defaultProbeAfter             = time.Second

	// maxLeanBody is the largest request body the lean path writes; a
	// larger one goes to the fallback, whose writer runs concurrently with
	// its reader (an upstream may answer before reading all of it).
	maxLeanBody = 1 << 20
	// max1xx bounds the informational responses skipped before the final
	// one, as net/http's Transport does.
	max1xx = 5
	// connBufSize is the size of each connection's read and write buffers.
	connBufSize = 4 << 10
)

// aLongTimeAgo is a deadline in the past: setting it unblocks any I/O.
var aLongTimeAgo = time.Unix(1, 0)

var (
	errBodyClosed        = errors.New("read on closed response body")
	errHeaderTooLarge    = errors.New("response header too large")
	errUnexpectedUpgrade = errors.New("unexpected 101 Switching Protocols")
	errTooMany1xx        = errors.New("too many 1xx informational responses")
)

// UpstreamTransport is the reverse proxy's default http.RoundTripper. It
// does each round trip on the caller's goroutine: write the request, flush,
// read the response, with no reader or writer goroutine per connection (on
// a machine with few cores the hand-offs between them cost more than the
// I/O). It keeps a bounded pool of idle persistent connections per host.
//
// The lean path speaks HTTP/1.1 over plain TCP to http:// upstreams, for
// requests whose body is absent or of known length up to 1 MiB. Everything
// else goes to Fallback: https, upgrades (WebSocket), CONNECT, request
// bodies of unknown length or larger than 1 MiB (they must stream while
// the response is read), and requests with trailers or an explicit
// Transfer-Encoding.
//
// A request that fails on a reused idle connection before any byte of the
// response was read (the upstream closed it, EOF or connection reset) is
// sent once more on a fresh connection when that is safe, with the rules
// of net/http's Transport: when nothing reached the connection and the body
// can be replayed (none, or Request.GetBody set), or when the method is
// idempotent (GET, HEAD, OPTIONS, TRACE, or an Idempotency-Key header) and
// the body can be replayed. A response partly read is never retried. So
// that requests which cannot be retried rarely meet a closed connection, a
// connection idle for a second or more is checked without blocking (one
// non-blocking peek) before it is reused.
//
// The request's context bounds the whole exchange, response body included:
// its deadline becomes the connection's, and its cancellation unblocks any
// read or write. The connection goes back to the pool when the response
// body has been read to EOF (close it all the same), unless the request or
// the response asked for Connection: close; a body closed before EOF
// closes the connection. Responses without a body (HEAD, 204, 304)
// release it at once.
//
// The zero value is usable. An UpstreamTransport is safe for concurrent
// use; set its fields before the first request and do not copy it after.
type UpstreamTransport struct {
	// Fallback sends the requests the lean path does not handle (default:
	// an *http.Transport tuned for one busy upstream: 256 idle connections
	// per host, 90s idle timeout, 60s response header timeout).
	Fallback http.RoundTripper
	// MaxIdlePerHost bounds the idle connections kept per host (default
	// 256; negative: none are kept).
	MaxIdlePerHost int
	// IdleTimeout is how long a connection may stay idle and still be
	// reused; older ones are closed when found (default 90s; negative: no
	// limit).
	IdleTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the response header once
	// the request is written, within the request context's deadline
	// (default 60s; negative: only the context bounds it).
	ResponseHeaderTimeout time.Duration
	// MaxResponseHeaderBytes bounds the size of a response header (zero or
	// negative: 10 MiB, as net/http's Transport).
	MaxResponseHeaderBytes int64

	// probeAfter is how long a connection must have been idle for its
	// checkout to peek, without blocking, whether the upstream closed it
	// (0: 1s; negative: never). A request found to need a fresh connection
	// that way needs no retry, which matters for those that cannot be
	// retried (a POST through httputil.ReverseProxy has no GetBody).
	probeAfter time.Duration

	once      sync.Once
	fallback  http.RoundTripper
	dialer    net.Dialer
	maxIdle   int
	idleTTL   time.Duration // <= 0: no limit
	headerTTL time.Duration // <= 0: none
	maxHeader int64
	probe     time.Duration // <= 0: never

	mu   sync.Mutex
	idle map[string][]*upConn // per host:port, the most recently used last
}

var _ http.RoundTripper = (*UpstreamTransport)(nil)

// StdUpstreamTransport returns net/http's Transport tuned for one busy
// upstream: UpstreamTransport's default fallback, and the proxy's
// transport for every request with limiter --upstream-transport std.
func StdUpstreamTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		ForceAttemptHTTP2:     true,
	}
}

func (t *UpstreamTransport) init() {
	t.once.Do(func() {
		t.fallback = t.Fallback
		if t.fallback == nil {
			t.fallback = StdUpstreamTransport()
		}
		t.dialer = net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
		t.maxIdle = orDefault(t.MaxIdlePerHost, defaultMaxIdlePerHost)
		t.idleTTL = orDefault(t.IdleTimeout, defaultIdleTimeout)
		t.headerTTL = orDefault(t.ResponseHeaderTimeout, defaultResponseHeaderTimeout)
		t.maxHeader = t.MaxResponseHeaderBytes
		if t.maxHeader <= 0 {
			t.maxHeader = defaultMaxResponseHeaderBytes
		}
		t.probe = orDefault(t.probeAfter, defaultProbeAfter)
	})
}

func orDefault[T int | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// RoundTrip sends req and returns the upstream's response, on the lean
// path or through Fallback (see UpstreamTransport).
func (t *UpstreamTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.init()
	if !lean(req) {
		return t.fallback.RoundTrip(req)
	}
	ctx := req.Context()
	addr := hostPort(req.URL)
	if err := ctx.Err(); err != nil {
		closeBody(req)
		return nil, fmt.Errorf("api: upstream %s: %w", addr, err)
	}
	c, err := t.getConn(ctx, addr)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	resp, retry, err := t.exchange(ctx, c, req)
	if err != nil && retry && ctx.Err() == nil {
		// Once more, on a fresh connection, with a fresh body.
		out := req
		if hasBody(req) {
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, fmt.Errorf("api: upstream %s: rewind request body: %w (after: %w)", addr, gerr, err)
			}
			out = new(http.Request)
			*out = *req
			out.Body = body
		}
		if c, err = t.dial(ctx, addr); err != nil {
			closeBody(out)
			return nil, err
		}
		resp, _, err = t.exchange(ctx, c, out)
	}
	if err != nil {
		return nil, err
	}
	resp.Request = req
	return resp, nil
}

// lean reports whether the lean path handles req.
func lean(req *http.Request) bool {
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" || req.Method == http.MethodConnect {
		return false
	}
	if len(req.Header["Upgrade"]) > 0 || hasToken(req.Header["Connection"], "upgrade") {
		return false
	}
	if len(req.TransferEncoding) > 0 || len(req.Trailer) > 0 {
		return false
	}
	// A body with ContentLength 0 is of unknown length, as net/http reads it.
	return !hasBody(req) || (req.ContentLength > 0 && req.ContentLength <= maxLeanBody)
}

func hasBody(req *http.Request) bool { return req.Body != nil && req.Body != http.NoBody }

func closeBody(req *http.Request) {
	if hasBody(req) {
		_ = req.Body.Close()
	}
}

// hasToken reports whether a comma-separated header's values hold token.
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for v != "" {
			var f string
			f, v, _ = strings.Cut(v, ",")
			if strings.EqualFold(strings.TrimSpace(f), token) {
				return true
			}
		}
	}
	return false
}

// hostPort is the address to dial for u, the port defaulting to 80.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// rewindable reports whether req's body can be sent again.
func rewindable(req *http.Request) bool { return !hasBody(req) || req.GetBody != nil }

// replayable reports whether req may be sent again after it may have
// reached the upstream: net/http's rule (an idempotent method, or an
// idempotency key, and a body that can be sent again).
func replayable(req *http.Request) bool {
	if !rewindable(req) {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return len(req.Header["Idempotency-Key"]) > 0 || len(req.Header["X-Idempotency-Key"]) > 0
}

// connGone reports whether err says the upstream closed the connection.
func connGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED)
}

// upConn is one persistent connection to an upstream. It is owned by one
// round trip at a time, or by the idle pool.
type upConn struct {
	addr     string
	conn     net.Conn
	raw      syscall.RawConn // for the liveness probe; nil if the conn has none
	br       *bufio.Reader   // reads through the upConn (the header bound)
	bw       *bufio.Writer   // writes through the upConn (error tracking)
	cancel   func()          // sets a past deadline: unblocks any I/O
	idleAt   time.Time
	reused   bool  // taken from the idle pool
	deadline bool  // a deadline is set on conn
	limit    int64 // bytes Read may still return: the response header bound
	written  int64 // bytes written to conn in this round trip
	werr     error // the first error writing to conn in this round trip
}

// Read reads from the connection within the header bound.
func (c *upConn) Read(p []byte) (int, error) {
	if c.limit <= 0 {
		return 0, errHeaderTooLarge
	}
	if int64(len(p)) > c.limit {
		p = p[:c.limit]
	}
	n, err := c.conn.Read(p)
	c.limit -= int64(n)
	return n, err
}

// Write writes to the connection, recording what reached it.
func (c *upConn) Write(p []byte) (int, error) {
	n, err := c.conn.Write(p)
	c.written += int64(n)
	if err != nil && c.werr == nil {
		c.werr = err
	}
	return n, err
}

// setReadDeadline sets the read deadline without undoing a cancellation:
// if ctx ended meanwhile (its AfterFunc may have run before), the past
// deadline is set again.
func (c *upConn) setReadDeadline(ctx context.Context, d time.Time) {
	_ = c.conn.SetReadDeadline(d)
	c.deadline = true
	if ctx.Err() != nil {
		c.cancel()
	}
}

// getConn takes an idle connection to addr or dials one.
func (t *UpstreamTransport) getConn(ctx context.Context, addr string) (*upConn, error) {
	for {
		c, idle := t.takeIdle(addr)
		if c == nil {
			return t.dial(ctx, addr)
		}
		if t.probe > 0 && idle >= t.probe && !c.alive() {
			_ = c.conn.Close()
			continue
		}
		c.reused = true
		return c, nil
	}
}

// dial opens a new connection to addr.
func (t *UpstreamTransport) dial(ctx context.Context, addr string) (*upConn, error) {
	conn, err := t.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, wrapErr(ctx, addr, "dial", err)
	}
	c := &upConn{addr: addr, conn: conn, limit: math.MaxInt64}
	if sc, ok := conn.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn()
	}
	c.br = bufio.NewReaderSize(c, connBufSize)
	c.bw = bufio.NewWriterSize(c, connBufSize)
	c.cancel = func() { _ = conn.SetDeadline(aLongTimeAgo) }
	return c, nil
}

// takeIdle pops the most recently used idle connection to addr and says
// how long it was idle; nil if there is none still fresh.
func (t *UpstreamTransport) takeIdle(addr string) (*upConn, time.Duration) {
	t.mu.Lock()
	conns := t.idle[addr]
	if len(conns) == 0 {
		t.mu.Unlock()
		return nil, 0
	}
	c := conns[len(conns)-1]
	idle := time.Since(c.idleAt)
	if t.idleTTL > 0 && idle > t.idleTTL {
		// The most recently used is stale: so are all the others.
		stale := make([]*upConn, len(conns))
		copy(stale, conns)
		clear(conns)
		t.idle[addr] = conns[:0]
		t.mu.Unlock()
		for _, s := range stale {
			_ = s.conn.Close()
		}
		return nil, 0
	}
	conns[len(conns)-1] = nil
	t.idle[addr] = conns[:len(conns)-1]
	t.mu.Unlock()
	return c, idle
}

// putIdle returns c to the idle pool, or closes it when the pool is full.
// The oldest idle connection is closed when it went stale.
func (t *UpstreamTransport) putIdle(c *upConn) {
	if t.maxIdle <= 0 {
		_ = c.conn.Close()
		return
	}
	now := time.Now()
	c.idleAt, c.reused = now, false
	var stale *upConn
	t.mu.Lock()
	if t.idle == nil {
		t.idle = make(map[string][]*upConn)
	}
	conns := t.idle[c.addr]
	if len(conns) > 0 && t.idleTTL > 0 && now.Sub(conns[0].idleAt) > t.idleTTL {
		stale = conns[0]
		copy(conns, conns[1:])
		conns[len(conns)-1] = nil
		conns = conns[:len(conns)-1]
	}
	full := len(conns) >= t.maxIdle
	if !full {
		conns = append(conns, c)
	}
	t.idle[c.addr] = conns
	t.mu.Unlock()
	if stale != nil {
		_ = stale.conn.Close()
	}
	if full {
		_ = c.conn.Close()
	}
}

// CloseIdleConnections closes the idle connections, the lean path's and
// the fallback's; those in use are not interrupted.
func (t *UpstreamTransport) CloseIdleConnections() {
	t.init()
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, conns := range idle {
		for _, c := range conns {
			_ = c.conn.Close()
		}
	}
	if ci, ok := t.fallback.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// exchange writes req on c and reads the response header. It owns c: on
// error c is closed; on success c is released when the response body ends
// (at once when there is none). retry reports that the error came from a
// reused connection the upstream had closed, before any response byte, and
// that req may be sent again.
func (t *UpstreamTransport) exchange(ctx context.Context, c *upConn, req *http.Request) (resp *http.Response, retry bool, err error) {
	dl, hasDl := ctx.Deadline()
	if hasDl {
		_ = c.conn.SetDeadline(dl)
		c.deadline = true
	}
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, c.cancel)
	}
	c.written, c.werr = 0, nil
	werr := req.Write(c.bw) // closes req.Body
	if werr == nil {
		werr = c.bw.Flush()
	}
	if werr != nil {
		switch {
		case c.werr == nil: // not the connection: the request (its body could not be read, say)
			discard(c, stop)
			return nil, false, wrapErr(ctx, c.addr, "write request", werr)
		case c.written == 0: // nothing reached the upstream
			discard(c, stop)
			return nil, c.reused && rewindable(req) && connGone(werr), wrapErr(ctx, c.addr, "write request", werr)
		}
		// The upstream may have answered before it stopped reading (a 413,
		// say): read on, then close the connection.
	}

	headerDl := false
	if t.headerTTL > 0 {
		if hd := time.Now().Add(t.headerTTL); !hasDl || hd.Before(dl) {
			c.setReadDeadline(ctx, hd)
			headerDl = true
		}
	}
	c.limit = t.maxHeader
	if _, err := c.br.Peek(1); err != nil {
		discard(c, stop)
		if werr != nil {
			return nil, c.reused && replayable(req) && connGone(werr) && connGone(err), wrapErr(ctx, c.addr, "write request", werr)
		}
		return nil, c.reused && replayable(req) && connGone(err), wrapHeaderErr(ctx, c.addr, err, headerDl)
	}
	for n1xx := 0; ; {
		resp, err = http.ReadResponse(c.br, req)
		if err != nil {
			discard(c, stop)
			return nil, false, wrapHeaderErr(ctx, c.addr, err, headerDl)
		}
		code := resp.StatusCode
		if code < 100 || code > 199 {
			break
		}
		if code == http.StatusSwitchingProtocols {
			discard(c, stop) // never asked for: upgrades go to the fallback
			return nil, false, fmt.Errorf("api: upstream %s: %w", c.addr, errUnexpectedUpgrade)
		}
		if n1xx++; n1xx > max1xx {
			discard(c, stop)
			return nil, false, fmt.Errorf("api: upstream %s: %w", c.addr, errTooMany1xx)
		}
		c.limit = t.maxHeader
		if trace := httptrace.ContextClientTrace(ctx); trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(code, textproto.MIMEHeader(resp.Header)); err != nil {
				discard(c, stop)
				return nil, false, fmt.Errorf("api: upstream %s: informational response %d: %w", c.addr, code, err)
			}
		}
	}
	c.limit = math.MaxInt64
	if headerDl {
		var d time.Time // the body is bounded by the context only
		if hasDl {
			d = dl
		}
		c.setReadDeadline(ctx, d)
		c.deadline = hasDl || ctx.Err() != nil
	}
	reuse := werr == nil && !req.Close && !resp.Close
	if resp.Body == http.NoBody { // HEAD, 204, 304, Content-Length: 0
		t.finish(ctx, c, stop, reuse)
		return resp, false, nil
	}
	resp.Body = &upBody{t: t, ctx: ctx, rc: resp.Body, c: c, stop: stop, addr: c.addr, reuse: reuse}
	return resp, false, nil
}

// finish ends a round trip on c: back to the pool when reuse allows and
// the exchange ended cleanly, closed otherwise.
func (t *UpstreamTransport) finish(ctx context.Context, c *upConn, stop func() bool, reuse bool) {
	if stop != nil && (!stop() || ctx.Err() != nil) {
		reuse = false // cancelled: the deadline is (or is about to be) in the past
	}
	if !reuse || c.br.Buffered() > 0 { // bytes past the response: not HTTP we understand
		_ = c.conn.Close()
		return
	}
	if c.deadline {
		if err := c.conn.SetDeadline(time.Time{}); err != nil {
			_ = c.conn.Close()
			return
		}
		c.deadline = false
	}
	t.putIdle(c)
}

// discard ends a round trip on c by closing it.
func discard(c *upConn, stop func() bool) {
	if stop != nil {
		stop()
	}
	_ = c.conn.Close()
}

// wrapErr adds context to err; when the request's context ended, the
// error is the context's (the I/O error is the deadline set to unblock it).
func wrapErr(ctx context.Context, addr, op string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("api: upstream %s: %s: %w", addr, op, cerr)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			return fmt.Errorf("api: upstream %s: %s: %w", addr, op, context.DeadlineExceeded)
		}
	}
	return fmt.Errorf("api: upstream %s: %s: %w", addr, op, err)
}

// wrapHeaderErr is wrapErr for errors reading the response header, where a
// timeout that is not the context's is ResponseHeaderTimeout's.
func wrapHeaderErr(ctx context.Context, addr string, err error, headerDl bool) error {
	if headerDl && ctx.Err() == nil && errors.Is(err, os.ErrDeadlineExceeded) {
		if dl, ok := ctx.Deadline(); !ok || time.Now().Before(dl) {
			return fmt.Errorf("api: upstream %s: timeout awaiting response headers: %w", addr, err)
		}
	}
	return wrapErr(ctx, addr, "read response", err)
}

// upBody is a lean response's body: it releases the connection at EOF and
// closes it when closed before.
type upBody struct {
	t     *UpstreamTransport
	ctx   context.Context
	rc    io.ReadCloser // http.ReadResponse's body; never closed (that would drain it)
	stop  func() bool
	addr  string
	reuse bool

	mu     sync.Mutex
	c      *upConn // nil once released or closed
	eof    bool
	closed bool
}

// Read reads the body; at EOF the connection goes back to the pool.
func (b *upBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	closed, eof := b.closed, b.eof
	b.mu.Unlock()
	if closed {
		return 0, errBodyClosed
	}
	if eof {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	if err == nil {
		return n, nil
	}
	b.mu.Lock()
	c := b.c
	b.c = nil
	b.eof = b.eof || err == io.EOF
	b.mu.Unlock()
	if err == io.EOF {
		if c != nil {
			b.t.finish(b.ctx, c, b.stop, b.reuse)
		}
		return n, io.EOF
	}
	if c != nil {
		discard(c, b.stop)
	}
	return n, wrapErr(b.ctx, b.addr, "read response body", err)
}

// Close closes the body. Before EOF it closes the connection: a half-read
// connection is never reused, and draining could take forever.
func (b *upBody) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	c := b.c
	b.c = nil
	b.mu.Unlock()
	if c != nil {
		discard(c, b.stop)
	}
	return nil
}
