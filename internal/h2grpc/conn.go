package h2grpc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

const (
	// recvWindow is the stream and connection window the server grants
	// (1 MiB, as the grpc-go server had: fixed, no BDP pings).
	recvWindow = 1 << 20
	// preface is HTTP/2's client connection preface.
	preface = http2.ClientPreface
	// prefaceTimeout bounds the wait for the preface and the first SETTINGS.
	prefaceTimeout = 20 * time.Second
	// maxPingStrikes: the pings tolerated too soon after another (grpc-go's 2).
	maxPingStrikes = 2
	// maxSettingsPerWindow bounds the peer's SETTINGS frames in calmWindow.
	maxSettingsPerWindow = 100
	// calmWindow is the period of the settings and reset counters.
	calmWindow = time.Second
	// writeTimeout bounds a write to a client that does not read: the
	// connection is closed, and the worker that wrote is free.
	writeTimeout = 10 * time.Second
)

// conn is one client connection. The reader goroutine (serve) owns the
// fields marked "reader"; mu guards the stream table; wmu guards the
// framer's writes, the send windows and the peer's settings. Lock order:
// mu before wmu.
type conn struct {
	s  *Server
	nc net.Conn
	fr *http2.Framer
	br *bufio.Reader
	bw *bufio.Writer

	ctx    context.Context // ends when the connection closes
	cancel context.CancelFunc

	mu       sync.Mutex
	streams  map[uint32]*stream
	free     []*stream // streams for reuse (mu)
	maxID    uint32    // highest stream id taken (mu)
	draining bool      // GOAWAY sent (mu)

	wmu        sync.Mutex
	wcond      sync.Cond    // wmu: a window opened, a stream reset or the connection closed
	waiting    atomic.Int32 // writers about to take wmu: the last one flushes
	running    atomic.Int32 // calls dispatched and not yet writing their answer
	werr       error        // wmu: the first write error; later writes are dropped
	sendWin    int64        // wmu: connection send window
	peerWin    int64        // wmu: the peer's SETTINGS_INITIAL_WINDOW_SIZE
	maxFrame   int          // wmu: the peer's SETTINGS_MAX_FRAME_SIZE
	wrote      atomic.Bool  // an answer was written since the last ping
	hbuf       []byte       // wmu: an error answer's header block
	sizeUpdate bool         // wmu: begin the next header block with a table size update to 0
	wdl        time.Time    // wmu: when the write deadline was last pushed back
	ready      atomic.Bool  // the server's SETTINGS are sent
	closing    atomic.Bool  // close began: answers are dropped

	// reader
	recvWin      int64 // connection receive window left
	unacked      int64 // receive credit not yet given back
	lastPing     time.Time
	pingStrikes  int
	calmStart    time.Time
	settingsSeen int
	resets       int

	// keepalive (its timer's function only)
	seen    atomic.Bool // a frame was read since the last keepalive check
	pingOut bool
	ka      *time.Timer
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, streams: map[uint32]*stream{}, sendWin: 65535, peerWin: 65535,
		maxFrame: 16384, recvWin: recvWindow}
	c.wcond.L = &c.wmu
	c.bw = bufio.NewWriterSize(nc, 32<<10)
	c.br = bufio.NewReaderSize(nc, 16<<10)
	c.fr = http2.NewFramer(c.bw, c.br)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = s.o.MaxHeaderListSize
	c.fr.SetMaxReadFrameSize(16384) // the default this server advertises
	c.fr.SetReuseFrames()
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c
}

// connError ends the connection with GOAWAY code.
type connError struct {
	code   http2.ErrCode
	reason string
}

func (e connError) Error() string { return fmt.Sprintf("h2grpc: %v: %s", e.code, e.reason) }

// serve is the connection's reader goroutine: it returns when the
// connection ends, having closed it.
func (c *conn) serve() {
	defer c.close()
	err := c.handshake()
	if err == nil {
		c.ka = time.AfterFunc(time.Duration(1<<63-1), c.keepalive)
		c.ka.Reset(c.s.o.KeepaliveTime)
		defer c.ka.Stop()
		err = c.readLoop()
	}
	var ce connError
	switch {
	case errors.As(err, &ce):
		c.writeGoAway(ce.code, ce.reason)
	case err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed):
		c.s.o.Logger.Debug("h2grpc: connection", "remote", c.nc.RemoteAddr().String(), "err", err)
	}
}

// handshake reads the client preface, sends the server's SETTINGS and
// widens the connection window.
func (c *conn) handshake() error {
	_ = c.nc.SetReadDeadline(c.s.o.Now().Add(prefaceTimeout))
	var p [len(preface)]byte
	if _, err := io.ReadFull(c.br, p[:]); err != nil {
		return fmt.Errorf("h2grpc: reading the preface: %w", err)
	}
	if string(p[:]) != preface {
		return errors.New("h2grpc: not an HTTP/2 client preface")
	}
	c.wmu.Lock()
	_ = c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: c.s.o.MaxConcurrentStreams},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: recvWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: c.s.o.MaxHeaderListSize},
	)
	_ = c.fr.WriteWindowUpdate(0, recvWindow-65535)
	err := c.bw.Flush()
	c.ready.Store(true)
	c.wmu.Unlock()
	if err != nil {
		return fmt.Errorf("h2grpc: writing settings: %w", err)
	}
	f, err := c.fr.ReadFrame()
	if err != nil {
		return err
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		return connError{http2.ErrCodeProtocol, "the first frame is not SETTINGS"}
	}
	if err := c.onSettings(sf); err != nil {
		return err
	}
	_ = c.nc.SetReadDeadline(time.Time{})
	return nil
}

// close ends the connection: calls in flight see their context
// cancelled, and writers waiting for a window give up.
func (c *conn) close() {
	c.closing.Store(true) // before the calls see their context end: no answer after
	c.cancel()
	_ = c.nc.Close() // first: a writer blocked on the socket lets go of wmu
	c.wmu.Lock()
	if c.werr == nil {
		c.werr = net.ErrClosed
	}
	c.wcond.Broadcast()
	c.wmu.Unlock()
}

// abort closes the connection from outside the reader (Server.Close).
func (c *conn) abort() { c.close() }

// inFlight is the number of open calls.
func (c *conn) inFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.streams)
}
