package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"sync"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Conn is the h2 path's client: ShouldRateLimit calls written straight
// onto one HTTP/2 connection (pre-marshalled requests, one HEADERS and one
// DATA frame each, written by the calling goroutine) and answers read by
// one reader goroutine, without grpc-go's client machinery. It is to the
// grpc path what wrk is to net/http's client: a load generator that costs
// the shared machine less, with a body per key (h2load sends one).
type h2Conn struct {
	mu        sync.Mutex // guards the writes, enc, hbuf, next
	bw        *bufio.Writer
	fr        *http2.Framer
	enc       *hpack.Encoder
	hbuf      bytes.Buffer
	next      uint32
	authority string

	pmu     sync.Mutex
	pending map[uint32]chan h2Answer
	err     error // the reader's, once it stopped
}

// h2Answer is a call's outcome: its grpc-status and the overall_code.
type h2Answer struct {
	status string
	code   byte
	err    error
}

// h2Window is the stream and connection window the client offers (as
// Envoy's defaults).
const h2Window = envoyWindow

func dialH2(addr string) (*h2Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("benchgrpc: h2: %w", err)
	}
	h := &h2Conn{bw: bufio.NewWriterSize(c, 16<<10), next: 1, authority: addr, pending: map[uint32]chan h2Answer{}}
	h.fr = http2.NewFramer(h.bw, bufio.NewReaderSize(c, 32<<10))
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.enc = hpack.NewEncoder(&h.hbuf)
	if _, err := h.bw.WriteString(http2.ClientPreface); err != nil {
		return nil, err
	}
	if err := h.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2Window}); err != nil {
		return nil, err
	}
	if err := h.fr.WriteWindowUpdate(0, h2Window-65535); err != nil {
		return nil, err
	}
	if err := h.bw.Flush(); err != nil {
		return nil, err
	}
	go h.read()
	return h, nil
}

// call sends one framed request (gRPC's 5-byte prefix and the message)
// and waits for its answer.
func (h *h2Conn) call(framed []byte) (h2Answer, error) {
	ch := make(chan h2Answer, 1)
	h.mu.Lock()
	id := h.next
	h.next += 2
	h.pmu.Lock()
	if h.err != nil {
		h.pmu.Unlock()
		h.mu.Unlock()
		return h2Answer{}, h.err
	}
	h.pending[id] = ch
	h.pmu.Unlock()
	h.hbuf.Reset()
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", fullMethod}, {":authority", h.authority},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hbuf.Bytes(), EndHeaders: true})
	if err == nil {
		err = h.fr.WriteData(id, true, framed)
	}
	if err == nil {
		err = h.bw.Flush()
	}
	h.mu.Unlock()
	if err != nil {
		return h2Answer{}, fmt.Errorf("benchgrpc: h2: %w", err)
	}
	a := <-ch
	return a, a.err
}

// read demultiplexes the answers until the connection fails.
func (h *h2Conn) read() {
	got := map[uint32]*h2Answer{}
	consumed := uint32(0)
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			h.fail(err)
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.write(func() error { return h.fr.WriteSettingsAck() })
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				h.write(func() error { return h.fr.WritePing(true, f.Data) })
			}
		case *http2.GoAwayFrame:
			h.fail(fmt.Errorf("goaway: %v", f.ErrCode))
			return
		case *http2.RSTStreamFrame:
			h.deliver(f.StreamID, h2Answer{err: fmt.Errorf("stream reset: %v", f.ErrCode)})
		case *http2.MetaHeadersFrame:
			a := got[f.StreamID]
			if a == nil {
				a = &h2Answer{}
				got[f.StreamID] = a
			}
			if s := f.PseudoValue("status"); s != "" && s != "200" {
				a.err = fmt.Errorf("http status %s", s)
			}
			for _, hf := range f.RegularFields() {
				if hf.Name == "grpc-status" {
					a.status = hf.Value
				}
			}
			if f.StreamEnded() {
				delete(got, f.StreamID)
				h.deliver(f.StreamID, *a)
			}
		case *http2.DataFrame:
			a := got[f.StreamID]
			if a == nil {
				a = &h2Answer{}
				got[f.StreamID] = a
			}
			// The message follows gRPC's 5-byte prefix; overall_code is
			// field 1 (tag 0x08), written first.
			if d := f.Data(); len(d) >= 7 && d[5] == 0x08 {
				a.code = d[6]
			}
			if consumed += uint32(len(f.Data())); consumed > 1<<20 {
				n := consumed
				consumed = 0
				h.write(func() error { return h.fr.WriteWindowUpdate(0, n) })
			}
			if f.StreamEnded() {
				delete(got, f.StreamID)
				h.deliver(f.StreamID, *a)
			}
		}
	}
}

func (h *h2Conn) write(fn func() error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := fn(); err == nil {
		_ = h.bw.Flush()
	}
}

func (h *h2Conn) deliver(id uint32, a h2Answer) {
	h.pmu.Lock()
	ch := h.pending[id]
	delete(h.pending, id)
	h.pmu.Unlock()
	if ch != nil {
		ch <- a
	}
}

func (h *h2Conn) fail(err error) {
	h.pmu.Lock()
	defer h.pmu.Unlock()
	h.err = fmt.Errorf("benchgrpc: h2: %w", err)
	for id, ch := range h.pending {
		ch <- h2Answer{err: h.err}
		delete(h.pending, id)
	}
}

// frame is a marshalled message in gRPC's framing (uncompressed).
func frame(msg []byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg))), msg...)
}
