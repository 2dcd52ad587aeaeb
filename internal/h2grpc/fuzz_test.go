package h2grpc

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// fakeConn reads r, then io.EOF; writes go nowhere.
type fakeConn struct{ r io.Reader }

func (f *fakeConn) Read(b []byte) (int, error)       { return f.r.Read(b) }
func (f *fakeConn) Write(b []byte) (int, error)      { return len(b), nil }
func (f *fakeConn) Close() error                     { return nil }
func (f *fakeConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (f *fakeConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (f *fakeConn) SetDeadline(time.Time) error      { return nil }
func (f *fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (f *fakeConn) SetWriteDeadline(time.Time) error { return nil }

// seedFrames is a call, a ping, a window update and a reset, as a client
// sends them after its SETTINGS.
func seedFrames() []byte {
	var b, hb bytes.Buffer
	fr := http2.NewFramer(&b, nil)
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", echoMethod}, {"content-type", "application/grpc"}, {"grpc-timeout", "1S"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	_ = fr.WriteData(1, true, message(0, []byte("hello")))
	_ = fr.WritePing(false, [8]byte{1})
	_ = fr.WriteWindowUpdate(0, 1000)
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: hb.Bytes(), EndHeaders: true})
	_ = fr.WriteRSTStream(3, http2.ErrCodeCancel)
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 5})
	return b.Bytes()
}

// FuzzConn feeds a connection's reader arbitrary bytes after the preface
// and the client's SETTINGS: it must neither panic nor hang, and keep no
// more streams than MaxConcurrentStreams.
func FuzzConn(f *testing.F) {
	f.Add(seedFrames())
	f.Add([]byte{})
	f.Add([]byte{0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8})
	s, err := New(Options{Methods: map[string]Handler{echoMethod: echo}, MaxConcurrentStreams: 8, Workers: 2})
	if err != nil {
		f.Fatal(err)
	}
	s.started.Do(s.startWorkers)
	f.Cleanup(s.Close)
	var head bytes.Buffer
	head.WriteString(http2.ClientPreface)
	_ = http2.NewFramer(&head, nil).WriteSettings()
	f.Fuzz(func(t *testing.T, data []byte) {
		c := newConn(s, &fakeConn{r: io.MultiReader(bytes.NewReader(head.Bytes()), bytes.NewReader(data))})
		c.serve()
		c.mu.Lock()
		n := len(c.streams)
		c.mu.Unlock()
		if n > 8 {
			t.Fatalf("%d streams open, above the bound", n)
		}
	})
}
