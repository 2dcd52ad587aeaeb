package h2grpc

import (
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// stream is one call. The reader sets it up and fills in; once
// dispatched, only its worker touches in and out. Streams are reused
// through their connection's free list (only the reader takes from it).
type stream struct {
	c          *conn
	id         uint32
	h          Handler
	ctx        context.Context
	cancel     context.CancelFunc
	in         []byte // the request: gRPC prefix and message (reader, then worker)
	out        []byte // the answer's storage (worker)
	recvd      int64  // DATA bytes received, padding included (reader)
	sendWin    int64  // the stream's send window (wmu)
	dispatched bool   // the request is complete and the call runs (reader)
	reset      atomic.Bool
}

// maxKept bounds the buffers a stream keeps for its next call.
const maxKept = 4 << 10

// newStream returns a stream for call id with handler h and timeout (-1:
// none), from the free list if it can, and enters it in the table (reader).
func (c *conn) newStream(id uint32, h Handler, timeout time.Duration) *stream {
	c.mu.Lock()
	var st *stream
	if n := len(c.free); n > 0 {
		st, c.free = c.free[n-1], c.free[:n-1]
	} else {
		st = &stream{c: c}
	}
	c.streams[id] = st
	c.mu.Unlock()
	st.id, st.h, st.in, st.recvd, st.dispatched = id, h, st.in[:0], 0, false
	st.reset.Store(false)
	c.wmu.Lock()
	st.sendWin = c.peerWin
	c.wmu.Unlock()
	if timeout >= 0 {
		st.ctx, st.cancel = context.WithTimeout(c.ctx, timeout)
	} else {
		st.ctx, st.cancel = context.WithCancel(c.ctx)
	}
	return st
}

// finish takes st out of the table, for reuse.
func (c *conn) finish(st *stream) {
	st.cancel()
	st.ctx, st.h = nil, nil
	if cap(st.in) > maxKept {
		st.in = nil
	}
	if cap(st.out) > maxKept {
		st.out = nil
	}
	c.mu.Lock()
	delete(c.streams, st.id)
	c.free = append(c.free, st)
	c.mu.Unlock()
}

// run runs st's call and writes its answer (a worker).
func (c *conn) run(st *stream) {
	if cap(st.out) < 5 {
		st.out = make([]byte, 5, 512)
	}
	out, err := st.h(st.ctx, st.in[5:], st.out[:5])
	if err == nil && len(out) >= 5 {
		st.out = out
		out[0] = 0
		binary.BigEndian.PutUint32(out[1:5], uint32(len(out)-5))
	} else if err == nil {
		err = status.Error(codes.Internal, "h2grpc: the handler dropped the buffer")
	}
	c.respond(st, out, err)
	c.finish(st)
}

// respond writes st's answer: HEADERS, DATA and trailers, or with an
// error the trailers alone.
func (c *conn) respond(st *stream, out []byte, err error) {
	c.running.Add(-1)
	c.waiting.Add(1)
	c.wmu.Lock()
	c.waiting.Add(-1)
	defer c.wmu.Unlock()
	if c.werr != nil || st.reset.Load() || c.closing.Load() {
		return
	}
	var werr error
	if err != nil {
		code, msg := errStatus(err)
		werr = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: c.block(c.trailersOnly(code, msg)),
			EndStream: true, EndHeaders: true})
	} else {
		werr = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: c.block(okHeaders), EndHeaders: true})
		if werr == nil {
			werr = c.writeData(st, out)
		}
		if werr == nil && !st.reset.Load() {
			werr = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: c.block(okTrailers),
				EndStream: true, EndHeaders: true})
		}
	}
	c.wrote.Store(true)
	c.setErr(werr)
	if c.waiting.Load() == 0 && c.running.Load() > 0 {
		// Other calls of the connection are running: give them a moment
		// to finish and write behind this answer, in the same flush.
		c.wmu.Unlock()
		runtime.Gosched()
		c.wmu.Lock()
	}
	c.flushLocked()
}

// errStatus is the gRPC status of a handler's error.
func errStatus(err error) (codes.Code, string) {
	if s, ok := status.FromError(err); ok {
		return s.Code(), s.Message()
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded, err.Error()
	case errors.Is(err, context.Canceled):
		return codes.Canceled, err.Error()
	}
	return codes.Unknown, err.Error()
}

// writeData writes p as DATA frames within the peer's frame size and the
// send windows, waiting for WINDOW_UPDATE as needed (wmu held; it is
// released while waiting). A reset stream or a closed connection ends it
// without error: there is no one to answer.
func (c *conn) writeData(st *stream, p []byte) error {
	for len(p) > 0 {
		n := min(int64(len(p)), int64(c.maxFrame), c.sendWin, st.sendWin)
		if n <= 0 {
			if c.werr != nil || st.reset.Load() {
				return nil
			}
			if err := c.flush(); err != nil {
				return err
			}
			c.wcond.Wait()
			continue
		}
		if err := c.fr.WriteData(st.id, false, p[:n]); err != nil {
			return err
		}
		c.sendWin -= n
		st.sendWin -= n
		p = p[n:]
	}
	return nil
}

// setErr records the first write error (wmu held): the connection is
// closed, so the reader ends too.
func (c *conn) setErr(err error) {
	if err != nil && c.werr == nil {
		c.werr = err
		_ = c.nc.Close()
		c.wcond.Broadcast()
	}
}

// flushLocked flushes unless another writer is about to take wmu (it
// will flush then).
func (c *conn) flushLocked() {
	if c.werr == nil && c.waiting.Load() == 0 && c.bw.Buffered() > 0 {
		c.setErr(c.flush())
	}
}

// flush writes out the buffer (wmu held), within writeTimeout: the
// deadline is pushed back at most once a second.
func (c *conn) flush() error {
	if now := time.Now(); now.Sub(c.wdl) >= time.Second {
		c.wdl = now
		if err := c.nc.SetWriteDeadline(now.Add(writeTimeout)); err != nil {
			return err
		}
	}
	return c.bw.Flush()
}

// control writes a frame of the reader's (or the keepalive's, or the
// drain's) with fn.
func (c *conn) control(fn func() error) {
	c.waiting.Add(1)
	c.wmu.Lock()
	c.waiting.Add(-1)
	defer c.wmu.Unlock()
	if c.werr != nil {
		return
	}
	c.setErr(fn())
	c.flushLocked()
}

// writeReset resets stream id.
func (c *conn) writeReset(id uint32, code http2.ErrCode) {
	c.control(func() error { return c.fr.WriteRSTStream(id, code) })
}

// writeEarly answers call id before it ran: an HTTP status alone
// (code httpStatus, msg the status) or a gRPC status; rst: then reset
// the stream (NO_ERROR), as the client is still sending.
func (c *conn) writeEarly(id uint32, code codes.Code, msg string, rst bool) {
	c.control(func() error {
		var block []byte
		if code == httpStatus {
			block = appendField(nil, ":status", msg)
		} else {
			block = c.trailersOnly(code, msg)
		}
		err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.block(block), EndStream: true, EndHeaders: true})
		if err == nil && rst {
			err = c.fr.WriteRSTStream(id, http2.ErrCodeNo)
		}
		return err
	})
}

// writeGoAway sends GOAWAY with the last stream taken.
func (c *conn) writeGoAway(code http2.ErrCode, reason string) {
	c.mu.Lock()
	last := c.maxID
	c.mu.Unlock()
	c.control(func() error {
		if err := c.fr.WriteGoAway(last, code, []byte(reason)); err != nil {
			return err
		}
		return c.flush() // now: the connection may close next
	})
}

// goAway starts the drain: no call after the last one taken.
func (c *conn) goAway() {
	c.mu.Lock()
	c.draining = true
	c.mu.Unlock()
	if c.ready.Load() {
		c.writeGoAway(http2.ErrCodeNo, "")
	}
}

// keepalive is the keepalive timer's function: after KeepaliveTime
// without a frame it pings, and KeepaliveTimeout later, still without
// one, it closes the connection.
func (c *conn) keepalive() {
	if c.ctx.Err() != nil {
		return
	}
	if c.seen.Swap(false) {
		c.pingOut = false
		c.ka.Reset(c.s.o.KeepaliveTime)
		return
	}
	if c.pingOut {
		c.close()
		return
	}
	c.pingOut = true
	c.control(func() error { return c.fr.WritePing(false, [8]byte{'k', 'e', 'e', 'p', 'a', 'l', 'v', 'e'}) })
	c.ka.Reset(c.s.o.KeepaliveTimeout)
}

// okHeaders and okTrailers are the header blocks of every answer
// (HPACK, without indexing: the encoder keeps no dynamic table).
var (
	okHeaders  = appendField([]byte{0x88}, "content-type", "application/grpc") // 0x88: :status 200
	okTrailers = appendField(nil, "grpc-status", "0")
)

// block is header block b, after a dynamic table size update to 0 if
// the peer's SETTINGS_HEADER_TABLE_SIZE came since the last block (wmu
// held).
func (c *conn) block(b []byte) []byte {
	if !c.sizeUpdate {
		return b
	}
	c.sizeUpdate = false
	return append([]byte{0x20}, b...)
}

// trailersOnly is the header block of an error's answer (wmu held: it
// reuses the connection's buffer).
func (c *conn) trailersOnly(code codes.Code, msg string) []byte {
	b := append(c.hbuf[:0], okHeaders...)
	b = appendField(b, "grpc-status", strconv.Itoa(int(code)))
	if msg != "" {
		b = appendField(b, "grpc-message", percentEncode(msg))
	}
	c.hbuf = b
	return b
}

// appendField appends a literal header field without indexing, its name
// and value as literals (RFC 7541 6.2.2).
func appendField(b []byte, name, value string) []byte {
	b = append(b, 0)
	b = appendHpackInt(b, 7, uint64(len(name)))
	b = append(b, name...)
	b = appendHpackInt(b, 7, uint64(len(value)))
	return append(b, value...)
}

// appendHpackInt appends v with an n-bit prefix (RFC 7541 5.1), the
// prefix's high bits zero (no Huffman coding).
func appendHpackInt(b []byte, n uint, v uint64) []byte {
	k := uint64(1)<<n - 1
	if v < k {
		return append(b, byte(v))
	}
	b = append(b, byte(k))
	v -= k
	for v >= 128 {
		b = append(b, byte(v%128+128))
		v /= 128
	}
	return append(b, byte(v))
}

// percentEncode encodes grpc-message: bytes outside printable ASCII and
// '%' as %XX.
func percentEncode(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e || s[i] == '%' {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		if ch := s[i]; ch < 0x20 || ch > 0x7e || ch == '%' {
			b = append(b, '%', hex[ch>>4], hex[ch&15])
		} else {
			b = append(b, ch)
		}
	}
	return string(b)
}
