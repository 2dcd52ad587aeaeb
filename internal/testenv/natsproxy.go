package testenv

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// NATSProxy relays TCP connections to a NATS server and lets a test step
// into them where a real server cannot be made to act on cue: OnPublish
// runs a func just before a client's PUB or HPUB of a given subject is
// relayed (the client's later bytes wait for it) and may answer it with a
// status instead, as a server does; HoldReplies holds what the server
// sends for a while, as a slow path would.
type NATSProxy struct {
	// URL is the proxy's nats:// URL, for the clients under test.
	URL    string
	target string
	ln     net.Listener

	mu        sync.Mutex
	prefix    string
	onPublish func(subject string) (status string)
	holdUntil time.Time
	conns     []net.Conn
}

// StartNATSProxy relays a free loopback port to the NATS server at
// serverURL (nats://host:port) until cleanup.
func StartNATSProxy(t testing.TB, serverURL string) *NATSProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &NATSProxy{URL: "nats://" + ln.Addr().String(), target: strings.TrimPrefix(serverURL, "nats://"), ln: ln}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// OnPublish makes f run, in the proxy's goroutine and before the message
// is relayed, for every message a client publishes on a subject that
// begins with prefix (f nil: none). Until f returns, nothing more of that
// client reaches the server. f returning "" relays the message; a status
// ("409 Consumer Deleted") drops it and answers its reply subject with
// that status, as nats-server answers a pull request it refuses.
func (p *NATSProxy) OnPublish(prefix string, f func(subject string) (status string)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.prefix, p.onPublish = prefix, f
}

// HoldReplies holds everything the server sends to the clients for d
// from now: it reaches them once d has passed.
func (p *NATSProxy) HoldReplies(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdUntil = time.Now().Add(d)
}

func (p *NATSProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		pc := &proxyConn{p: p, client: c, server: s, cw: bufio.NewWriterSize(c, 64<<10)}
		go pc.up()
		go pc.down()
	}
}

// close stops accepting and ends every relayed connection.
func (p *NATSProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// hook is the OnPublish func for subject, or nil.
func (p *NATSProxy) hook(subject string) func(string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.onPublish == nil || !strings.HasPrefix(subject, p.prefix) {
		return nil
	}
	return p.onPublish
}

// proxyConn is one relayed client connection.
type proxyConn struct {
	p              *NATSProxy
	client, server net.Conn
	mu             sync.Mutex    // whole frames to the client: the server's and the proxy's
	cw             *bufio.Writer // to the client, under mu
}

// up relays the client's protocol to the server frame by frame, noting
// its subscriptions and running the OnPublish func where it applies.
func (c *proxyConn) up() {
	defer c.server.Close()
	defer c.client.Close()
	r, w := bufio.NewReaderSize(c.client, 64<<10), bufio.NewWriterSize(c.server, 64<<10)
	sids := map[string]string{} // subject → sid of the client's subscriptions
	for {
		f, err := readFrame(r)
		if err != nil {
			_ = w.Flush()
			return
		}
		switch op := strings.ToUpper(f.args[0]); {
		case op == "SUB" && len(f.args) >= 3:
			sids[f.args[1]] = f.args[len(f.args)-1]
		case (op == "PUB" || op == "HPUB") && len(f.args) >= 3:
			if hook := c.p.hook(f.args[1]); hook != nil {
				if w.Flush() != nil {
					return
				}
				if status := hook(f.args[1]); status != "" {
					c.answer(f, sids, status)
					continue
				}
			}
		}
		if _, err := w.Write(f.raw); err != nil {
			return
		}
		if r.Buffered() == 0 && w.Flush() != nil {
			return
		}
	}
}

// answer sends the client, on publication f's reply subject, a message
// with no payload and the status header status.
func (c *proxyConn) answer(f frame, sids map[string]string, status string) {
	if op := strings.ToUpper(f.args[0]); (op == "PUB" && len(f.args) != 4) || (op == "HPUB" && len(f.args) != 5) {
		return // no reply subject
	}
	reply := f.args[2]
	hdr := "NATS/1.0 " + status + "\r\n\r\n"
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _ = fmt.Fprintf(c.cw, "HMSG %s %s %d %d\r\n%s\r\n", reply, sids[reply], len(hdr), len(hdr), hdr)
	_ = c.cw.Flush()
}

// down relays the server's frames to the client, each once any
// HoldReplies has passed.
func (c *proxyConn) down() {
	defer c.server.Close()
	defer c.client.Close()
	r := bufio.NewReaderSize(c.server, 64<<10)
	for {
		f, err := readFrame(r)
		if err != nil {
			return
		}
		c.p.mu.Lock()
		until := c.p.holdUntil
		c.p.mu.Unlock()
		time.Sleep(time.Until(until)) // a stalled path, not a wait
		c.mu.Lock()
		_, err = c.cw.Write(f.raw)
		if err == nil && r.Buffered() == 0 {
			err = c.cw.Flush()
		}
		c.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// frame is one protocol line with the payload a PUB, HPUB, MSG or HMSG
// line announces: raw is all of it as sent, args the line's fields.
type frame struct {
	raw  []byte
	args []string
}

// readFrame reads one frame from r.
func readFrame(r *bufio.Reader) (frame, error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return frame{}, err
	}
	f := frame{raw: line, args: strings.Fields(string(bytes.TrimSpace(line)))}
	if len(f.args) == 0 {
		f.args = []string{""}
	}
	switch strings.ToUpper(f.args[0]) {
	case "PUB", "HPUB", "MSG", "HMSG":
		n, err := strconv.Atoi(f.args[len(f.args)-1])
		if err != nil {
			return frame{}, fmt.Errorf("testenv: nats proxy: bad size in %q", line)
		}
		payload := make([]byte, n+2) // and CRLF
		if _, err := io.ReadFull(r, payload); err != nil {
			return frame{}, err
		}
		f.raw = append(f.raw, payload...)
	}
	return f, nil
}
