//go:build unix

package api

import "syscall"

// alive peeks, without blocking, whether an idle connection is still
// open: no byte waiting and no EOF. An idle connection has nothing to
// read, so a byte (an unsolicited response) condemns it too.
func (c *upConn) alive() bool {
	if c.raw == nil {
		return true
	}
	alive := false
	var buf [1]byte
	err := c.raw.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK || err == syscall.EINTR
		return true // never wait
	})
	return err == nil && alive
}
