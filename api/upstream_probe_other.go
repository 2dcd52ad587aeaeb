//go:build !unix

package api

// alive cannot peek here: a closed connection is found when used (and the
// request retried when it may be).
func (c *upConn) alive() bool { return true }
