package h2grpc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
)

// readLoop reads frames until the connection ends.
func (c *conn) readLoop() error {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return c.readError(err)
		}
		c.seen.Store(true)
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			err = c.onHeaders(f)
		case *http2.DataFrame:
			err = c.onData(f)
		case *http2.SettingsFrame:
			err = c.onSettings(f)
		case *http2.PingFrame:
			err = c.onPing(f)
		case *http2.WindowUpdateFrame:
			err = c.onWindowUpdate(f)
		case *http2.RSTStreamFrame:
			err = c.onReset(f)
		case *http2.PushPromiseFrame:
			err = connError{http2.ErrCodeProtocol, "PUSH_PROMISE from a client"}
		}
		// GOAWAY: the client sends no new calls; the ones open finish.
		// PRIORITY and unknown frame types are ignored.
		if err != nil {
			return err
		}
	}
}

// readError turns a framer error into the connection's end (a
// connError) or a stream's reset (nil: reading goes on).
func (c *conn) readError(err error) error {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &se):
		c.mu.Lock()
		st := c.streams[se.StreamID]
		c.mu.Unlock()
		if st != nil {
			c.drop(st)
		}
		c.writeReset(se.StreamID, se.Code)
		return nil
	case errors.As(err, &ce):
		reason := "protocol error"
		if d := c.fr.ErrorDetail(); d != nil {
			reason = d.Error()
		}
		return connError{http2.ErrCode(ce), reason}
	case errors.Is(err, http2.ErrFrameTooLarge):
		return connError{http2.ErrCodeFrameSize, "frame too large"}
	}
	return err
}

// onHeaders opens a call (or, on an open stream, takes its trailers).
func (c *conn) onHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	c.mu.Lock()
	if st := c.streams[id]; st != nil {
		c.mu.Unlock()
		if st.dispatched || !f.StreamEnded() {
			return connError{http2.ErrCodeProtocol, "HEADERS on an open stream without END_STREAM"}
		}
		return c.endRequest(st) // the request's trailers: nothing in them matters
	}
	if id%2 == 0 || id <= c.maxID {
		c.mu.Unlock()
		return connError{http2.ErrCodeProtocol, "HEADERS on a closed or server stream"}
	}
	c.maxID = id
	if c.draining {
		c.mu.Unlock()
		c.writeReset(id, http2.ErrCodeRefusedStream)
		return nil
	}
	if uint32(len(c.streams)) >= c.s.o.MaxConcurrentStreams {
		c.mu.Unlock()
		c.writeReset(id, http2.ErrCodeRefusedStream)
		return nil
	}
	c.mu.Unlock()

	h, timeout, code, msg := c.request(f)
	ended := f.StreamEnded()
	if f.Truncated { // beyond MaxHeaderListSize
		h, code, msg = nil, httpStatus, "431"
	}
	if code != codes.OK || h == nil {
		c.writeEarly(id, code, msg, !ended)
		return nil
	}
	st := c.newStream(id, h, timeout)
	if ended {
		return c.endRequest(st)
	}
	return nil
}

// httpStatus marks an early answer given as an HTTP status alone
// (request returns it as the code, the status in the message).
const httpStatus = codes.Code(1 << 20)

// request validates a call's headers: its handler and timeout (-1:
// none; 0 is a deadline already past), or the status it is answered with
// at once (httpStatus: an HTTP status).
func (c *conn) request(f *http2.MetaHeadersFrame) (Handler, time.Duration, codes.Code, string) {
	var method, path, ctype, enc, timeout string
	for _, hf := range f.Fields {
		switch hf.Name {
		case ":method":
			method = hf.Value
		case ":path":
			path = hf.Value
		case "content-type":
			ctype = hf.Value
		case "grpc-encoding":
			enc = hf.Value
		case "grpc-timeout":
			timeout = hf.Value
		}
	}
	switch {
	case method != "POST":
		return nil, 0, httpStatus, "405"
	case !grpcContentType(ctype):
		return nil, 0, httpStatus, "415"
	}
	h := c.s.o.Methods[path]
	if h == nil {
		return nil, 0, codes.Unimplemented, fmt.Sprintf("unknown method %s", clip(path))
	}
	if enc != "" && enc != "identity" {
		return nil, 0, codes.Unimplemented, fmt.Sprintf("grpc: Decompressor is not installed for grpc-encoding %q", clip(enc))
	}
	d := time.Duration(-1) // no deadline
	if timeout != "" {
		var ok bool
		if d, ok = parseTimeout(timeout); !ok {
			return nil, 0, codes.Internal, fmt.Sprintf("malformed grpc-timeout %q", clip(timeout))
		}
	}
	return h, d, codes.OK, ""
}

// grpcContentType: application/grpc, alone or with +proto (or ;params).
func grpcContentType(ct string) bool {
	rest, ok := strings.CutPrefix(ct, "application/grpc")
	return ok && (rest == "" || rest == "+proto" || rest[0] == ';' || strings.HasPrefix(rest, "+proto;"))
}

// parseTimeout reads grpc-timeout: at most 8 digits and a unit. A value
// beyond time.Duration's range is as good as none (the largest Duration).
func parseTimeout(s string) (time.Duration, bool) {
	if len(s) < 2 || len(s) > 9 {
		return 0, false
	}
	n, err := strconv.ParseUint(s[:len(s)-1], 10, 64)
	if err != nil {
		return 0, false
	}
	unit, ok := timeoutUnits[s[len(s)-1]]
	if !ok {
		return 0, false
	}
	if n > uint64(math.MaxInt64/unit) {
		return math.MaxInt64, true
	}
	return time.Duration(n) * unit, true
}

var timeoutUnits = map[byte]time.Duration{'H': time.Hour, 'M': time.Minute, 'S': time.Second,
	'm': time.Millisecond, 'u': time.Microsecond, 'n': time.Nanosecond}

// clip bounds a value quoted back to the client.
func clip(s string) string {
	if len(s) > 128 {
		return s[:128] + "..."
	}
	return s
}

// onData takes a request's message bytes.
func (c *conn) onData(f *http2.DataFrame) error {
	n := int64(f.Length) // padding included: it counts against the windows
	c.recvWin -= n
	if c.recvWin < 0 {
		return connError{http2.ErrCodeFlowControl, "the client overran the connection window"}
	}
	c.mu.Lock()
	st := c.streams[f.StreamID]
	idle := f.StreamID > c.maxID
	c.mu.Unlock()
	if st == nil && idle {
		return connError{http2.ErrCodeProtocol, "DATA on an idle stream"}
	}
	// The connection's credit goes back at once (the bytes are copied or
	// dropped), as grpc-go's server does: held until calls complete, a
	// few large requests sent in parts would exhaust it and stall every
	// stream. What a connection holds is bounded per stream instead.
	c.credit(n)
	switch {
	case st == nil: // a stream answered early or reset: the data is dropped
		return nil
	case st.dispatched:
		c.drop(st)
		c.writeReset(st.id, http2.ErrCodeStreamClosed)
		return nil
	}
	st.recvd += n
	if st.recvd > recvWindow {
		c.drop(st)
		c.writeReset(st.id, http2.ErrCodeFlowControl)
		return nil
	}
	data := f.Data()
	max := 5 + c.s.o.MaxRecvMsgSize
	if len(st.in)+len(data) > max {
		size := len(st.in) + len(data) - 5
		if len(st.in) >= 5 {
			size = int(binary.BigEndian.Uint32(st.in[1:5]))
		} else if len(st.in)+len(data) >= 5 {
			var p [5]byte
			copy(p[copy(p[:], st.in):], data)
			size = int(binary.BigEndian.Uint32(p[1:5]))
		}
		return c.refuse(st, codes.ResourceExhausted,
			fmt.Sprintf("grpc: received message larger than max (%d vs. %d)", size, c.s.o.MaxRecvMsgSize), !f.StreamEnded())
	}
	st.in = append(st.in, data...)
	if len(st.in) >= 5 {
		if st.in[0] != 0 {
			return c.refuse(st, codes.Internal, "grpc: compressed flag set with identity or empty encoding", !f.StreamEnded())
		}
		if size := int(binary.BigEndian.Uint32(st.in[1:5])); size > c.s.o.MaxRecvMsgSize {
			return c.refuse(st, codes.ResourceExhausted,
				fmt.Sprintf("grpc: received message larger than max (%d vs. %d)", size, c.s.o.MaxRecvMsgSize), !f.StreamEnded())
		}
	}
	if f.StreamEnded() {
		return c.endRequest(st)
	}
	return nil
}

// refuse answers st at once with code and msg, before its call ran.
// rst: the client is still sending (RST_STREAM NO_ERROR after the answer).
func (c *conn) refuse(st *stream, code codes.Code, msg string, rst bool) error {
	c.drop(st)
	c.writeEarly(st.id, code, msg, rst)
	return nil
}

// endRequest runs st's call once its request is complete: exactly one
// message.
func (c *conn) endRequest(st *stream) error {
	if len(st.in) < 5 || len(st.in) != 5+int(binary.BigEndian.Uint32(st.in[1:5])) {
		msg := "h2grpc: the request has no complete message"
		if len(st.in) >= 5 {
			msg = "h2grpc: a unary request carries one message"
		}
		return c.refuse(st, codes.Internal, msg, false)
	}
	st.dispatched = true
	c.running.Add(1)
	c.s.dispatch(st)
	return nil
}

// credit gives n bytes of receive window back to the client once a
// quarter of the window is owed.
func (c *conn) credit(n int64) {
	c.recvWin += n
	c.unacked += n
	if c.unacked < recvWindow/4 {
		return
	}
	inc := uint32(c.unacked)
	c.unacked = 0
	c.control(func() error { return c.fr.WriteWindowUpdate(0, inc) })
}

// onSettings applies the client's settings and acknowledges them.
func (c *conn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	if err := c.calm(&c.settingsSeen, maxSettingsPerWindow, "too many SETTINGS"); err != nil {
		return err
	}
	if err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			c.setPeerWindow(int64(s.Val))
		case http2.SettingMaxFrameSize:
			c.wmu.Lock()
			c.maxFrame = int(s.Val)
			c.wmu.Unlock()
		case http2.SettingHeaderTableSize:
			// The encoder keeps no dynamic table; a decoder that allows
			// less than the default 4096 bytes still expects to be told.
			c.wmu.Lock()
			c.sizeUpdate = true
			c.wmu.Unlock()
		}
		return nil
	}); err != nil {
		var ce http2.ConnectionError
		if errors.As(err, &ce) {
			return connError{http2.ErrCode(ce), "invalid setting"}
		}
		return err
	}
	c.control(c.fr.WriteSettingsAck)
	return nil
}

// setPeerWindow applies a new SETTINGS_INITIAL_WINDOW_SIZE to the open
// streams' send windows.
func (c *conn) setPeerWindow(v int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	delta := v - c.peerWin
	c.peerWin = v
	for _, st := range c.streams {
		st.sendWin += delta
	}
	c.wcond.Broadcast()
}

// calm counts one more frame of a kind in the current calmWindow, and
// ends the connection (ENHANCE_YOUR_CALM) beyond limit.
func (c *conn) calm(n *int, limit int, reason string) error {
	now := c.s.o.Now()
	if now.Sub(c.calmStart) >= calmWindow {
		c.calmStart, c.settingsSeen, c.resets = now, 0, 0
	}
	*n++
	if *n > limit {
		return connError{http2.ErrCodeEnhanceYourCalm, reason}
	}
	return nil
}

// onPing answers a ping, enforcing KeepaliveMinTime between pings.
func (c *conn) onPing(f *http2.PingFrame) error {
	if f.IsAck() {
		return nil // the keepalive's answer: seen is set
	}
	now := c.s.o.Now()
	if c.wrote.Swap(false) {
		c.pingStrikes = 0
	} else if (!c.s.o.PermitWithoutStream && c.inFlight() == 0) ||
		(!c.lastPing.IsZero() && now.Sub(c.lastPing) < c.s.o.KeepaliveMinTime) {
		c.pingStrikes++
	}
	c.lastPing = now
	if c.pingStrikes > maxPingStrikes {
		return connError{http2.ErrCodeEnhanceYourCalm, "too_many_pings"}
	}
	data := f.Data
	c.control(func() error { return c.fr.WritePing(true, data) })
	return nil
}

// onWindowUpdate widens a send window.
func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	inc := int64(f.Increment)
	if f.StreamID == 0 {
		c.wmu.Lock()
		c.sendWin += inc
		over := c.sendWin > 1<<31-1
		c.wcond.Broadcast()
		c.wmu.Unlock()
		if over {
			return connError{http2.ErrCodeFlowControl, "connection window above 2^31-1"}
		}
		return nil
	}
	c.mu.Lock()
	st := c.streams[f.StreamID]
	over := false
	if st != nil {
		c.wmu.Lock()
		st.sendWin += inc
		over = st.sendWin > 1<<31-1
		c.wcond.Broadcast()
		c.wmu.Unlock()
	}
	c.mu.Unlock()
	if over {
		c.drop(st)
		c.writeReset(f.StreamID, http2.ErrCodeFlowControl)
	}
	return nil
}

// onReset cancels a call; a flood of resets ends the connection.
func (c *conn) onReset(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	st := c.streams[f.StreamID]
	idle := f.StreamID > c.maxID
	c.mu.Unlock()
	if idle {
		return connError{http2.ErrCodeProtocol, "RST_STREAM on an idle stream"}
	}
	if st == nil {
		return nil
	}
	c.drop(st)
	return c.calm(&c.resets, 2*int(c.s.o.MaxConcurrentStreams), "too many resets")
}

// drop ends st from the reader's side (a reset, a protocol error, an
// early answer): its call's context is cancelled, a writer waiting for
// its window gives up, and a stream not yet running leaves the table (a
// running one leaves it when its worker is done).
func (c *conn) drop(st *stream) {
	st.reset.Store(true)
	st.cancel()
	c.wmu.Lock()
	c.wcond.Broadcast()
	c.wmu.Unlock()
	if !st.dispatched {
		c.finish(st)
	}
}
