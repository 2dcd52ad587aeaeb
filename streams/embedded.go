package streams

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Embedded is an in-process NATS server with JetStream, for the
// one-process default and for tests that need no external NATS.
type Embedded struct {
	Server *server.Server
	// URL is the client URL (nats://127.0.0.1:port).
	URL string
}

// StartEmbedded starts nats-server in process on loopback, JetStream
// stored under dir. port 0 picks a free port.
func StartEmbedded(dir string, port int) (*Embedded, error) {
	if port == 0 {
		port = server.RANDOM_PORT
	}
	s, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      port,
		JetStream: true,
		StoreDir:  dir,
		NoLog:     true,
		NoSigs:    true,
		// The limiter's own HTTP server is the only monitoring surface.
		HTTPPort: 0,
	})
	if err != nil {
		return nil, fmt.Errorf("streams: embedded nats: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("streams: embedded nats did not start within 10s")
	}
	return &Embedded{Server: s, URL: s.ClientURL()}, nil
}

// Stop shuts the server down and waits for it.
func (e *Embedded) Stop() {
	e.Server.Shutdown()
	e.Server.WaitForShutdown()
}
