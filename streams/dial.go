package streams

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Dial connects to the NATS server(s) at url once, without retrying, and
// closes the connection again. It returns the real cause of a failure (a
// refused or timed-out dial, a TLS or authorization error) where Connect,
// which retries in the background, gives none and nats.go itself says only
// "no servers available". The daemons call it once at start to log why
// NATS cannot be reached. Errors do not repeat url (it may carry a token).
func Dial(url string, timeout time.Duration, extra ...nats.Option) error {
	d := &recordingDialer{Dialer: net.Dialer{Timeout: timeout}}
	opts := append([]nats.Option{nats.Name("tollgate-dial"), nats.Timeout(timeout), nats.NoReconnect(), nats.SetCustomDialer(d)}, extra...)
	nc, err := nats.Connect(ServerURLs(url), opts...)
	if err != nil {
		if errors.Is(err, nats.ErrNoServers) {
			if last := d.lastErr(); last != nil {
				return last
			}
		}
		return err
	}
	nc.Close()
	return nil
}

// recordingDialer dials as net.Dialer does and remembers the last error.
type recordingDialer struct {
	net.Dialer
	mu   sync.Mutex
	last error
}

// Dial implements nats.CustomDialer.
func (d *recordingDialer) Dial(network, address string) (net.Conn, error) {
	c, err := d.Dialer.Dial(network, address)
	if err != nil {
		d.mu.Lock()
		d.last = err
		d.mu.Unlock()
	}
	return c, err
}

func (d *recordingDialer) lastErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last
}
