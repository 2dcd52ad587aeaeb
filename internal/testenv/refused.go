package testenv

import (
	"fmt"
	"syscall"
	"testing"
)

// RefusedAddr returns a loopback address ("127.0.0.1:PORT") where a TCP
// connection is refused, for the tests of a peer that is down. A port
// taken with net.Listen and closed again is not enough: a parallel test's
// server can bind it before the dial, which then reaches that server. So
// the port stays bound, to a socket that never listens, until the test
// ends: connections to it are refused, and no other socket can bind it
// or dial from it.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	syscall.ForkLock.RLock() // no child inherits the socket before CloseOnExec
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatalf("testenv: socket: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("testenv: bind a refused port: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("testenv: getsockname: %v", err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}
