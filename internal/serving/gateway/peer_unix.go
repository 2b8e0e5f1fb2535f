//go:build unix

package gateway

import (
	"net"
	"syscall"
)

// peerOpen says whether an idle connection is still open at the other
// end: a peek that finds nothing to read (EAGAIN), where the end of the
// stream, or bytes nobody asked for, mean the connection cannot carry a
// request. One non-blocking system call, no wake-up.
func peerOpen(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	var b [1]byte
	if err := rc.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true // never wait
	}); err != nil {
		return false
	}
	return open
}
