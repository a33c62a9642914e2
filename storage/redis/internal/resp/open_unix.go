//go:build unix

package resp

import (
	"errors"
	"net"
	"syscall"
)

// open reports whether an idle connection can take a command. The server
// sends nothing unasked, so a readable socket (data, its end, a reset)
// means the connection is over: a peek that would block is the only
// healthy answer. A TLS connection is not looked at: the server's
// post-handshake records (TLS 1.3 session tickets) wait unread in its
// socket, and a peek would take them for the end. Its failure is learnt
// at the next command, as on the other systems.
func open(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	healthy := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		healthy = errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK)
		return true
	})
	return err == nil && healthy
}
