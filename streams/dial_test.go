package streams

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// TestDialRealCause: a port nobody listens on gives the dial's own error,
// not "no servers available" (nor, as Connect's retrying connection would
// lead to, "outbound buffer limit exceeded").
func TestDialRealCause(t *testing.T) {
	t.Parallel()
	addr := testenv.RefusedAddr(t)
	err := Dial("nats://"+addr, time.Second)
	if err == nil || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Dial(closed port) = %v, want the refused dial", err)
	}
	if err := Dial(testenv.NATSURL(), 2*time.Second); err != nil {
		t.Fatalf("Dial(shared NATS) = %v", err)
	}
}
