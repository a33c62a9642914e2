package connpass

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// Supported says this system can pass connections (Linux: a unix
// SOCK_SEQPACKET pair keeps each message and its socket together).
const Supported = true

// Link is one end of the pair between the daemon and one agent process.
// Send may be called from any goroutine; Recv from one at a time.
type Link struct {
	c    *net.UnixConn
	rc   syscall.RawConn
	rbuf []byte
	oob  []byte
}

// Pair makes the pair: the daemon's end, and the agent's, to be given to
// the child (exec.Cmd.ExtraFiles) and then closed by the daemon.
func Pair() (*Link, *os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("connpass: socketpair: %w", err)
	}
	l, err := Open(uintptr(fds[0]))
	if err != nil {
		syscall.Close(fds[1])
		return nil, nil, err
	}
	return l, os.NewFile(uintptr(fds[1]), "connpass"), nil
}

// Open makes a Link of the descriptor fd (the agent's end, inherited),
// which it takes over: it is closed on exec from now on.
func Open(fd uintptr) (*Link, error) {
	syscall.CloseOnExec(int(fd))
	f := os.NewFile(fd, "connpass")
	c, err := net.FileConn(f) // a duplicate, closed on exec
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("connpass: descriptor %d: %w", fd, err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("connpass: descriptor %d is not a unix socket", fd)
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		uc.Close()
		return nil, err
	}
	return &Link{c: uc, rc: rc}, nil
}

// Send sends m, with sock's descriptor when m is a Conn or Back (the
// receiver gets a descriptor of its own; the caller still closes sock).
func (l *Link) Send(m Message, sock net.Conn) error {
	buf := m.Append(make([]byte, 0, headerLen+len(m.Data)))
	if len(buf) > MaxMessage {
		return ErrTooLong
	}
	if !m.Kind.carriesSocket() {
		_, _, err := l.c.WriteMsgUnix(buf, nil, nil)
		return err
	}
	sc, ok := sock.(syscall.Conn)
	if !ok {
		return fmt.Errorf("connpass: %T has no descriptor", sock)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	if err := raw.Control(func(fd uintptr) {
		_, _, werr = l.c.WriteMsgUnix(buf, syscall.UnixRights(int(fd)), nil)
	}); err != nil {
		return err
	}
	return werr
}

// SetWriteDeadline bounds the Sends under way and to come.
func (l *Link) SetWriteDeadline(t time.Time) error { return l.c.SetWriteDeadline(t) }

// Recv returns the next message, with the socket that came with it (a
// Conn or Back), which the caller owns. io.EOF: the other end closed. A
// message that cannot be used is an error wrapping ErrDropped, and any
// descriptor that came with it is closed: the caller may read on. Any
// other error ends the link.
func (l *Link) Recv() (Message, *os.File, error) {
	if l.rbuf == nil {
		l.rbuf = make([]byte, MaxMessage+1)
		l.oob = make([]byte, syscall.CmsgSpace(4*4))
	}
	var n, oobn, flags int
	var rerr error
	err := l.rc.Read(func(fd uintptr) bool {
		n, oobn, flags, _, rerr = syscall.Recvmsg(int(fd), l.rbuf, l.oob, syscall.MSG_CMSG_CLOEXEC)
		return rerr != syscall.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		if errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrClosed) {
			return Message{}, nil, io.EOF
		}
		return Message{}, nil, err
	}
	var fds []int
	if oobn > 0 {
		if cms, err := syscall.ParseSocketControlMessage(l.oob[:oobn]); err == nil {
			for _, cm := range cms {
				if got, err := syscall.ParseUnixRights(&cm); err == nil {
					fds = append(fds, got...)
				}
			}
		}
	}
	if n == 0 && oobn == 0 {
		return Message{}, nil, io.EOF // a datagram socket's end: the peer closed
	}
	closeAll := func(fds []int) {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}
	if flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0 {
		closeAll(fds)
		return Message{}, nil, fmt.Errorf("%w: cut short", ErrDropped)
	}
	m, err := Decode(l.rbuf[:n])
	if err != nil {
		closeAll(fds)
		return Message{}, nil, fmt.Errorf("%w: %w", ErrDropped, err)
	}
	if !m.Kind.carriesSocket() {
		closeAll(fds)
		return m, nil, nil
	}
	if len(fds) != 1 {
		closeAll(fds)
		return Message{}, nil, fmt.Errorf("%w: %c message with %d descriptors", ErrDropped, m.Kind, len(fds))
	}
	m.Data = append([]byte(nil), m.Data...)
	return m, os.NewFile(uintptr(fds[0]), "client"), nil
}

// Close closes this end; the other end's Recv returns io.EOF.
func (l *Link) Close() error { return l.c.Close() }

func closeOnExec(fd int) { syscall.CloseOnExec(fd) }

// FileConn makes a net.Conn of a received socket, and closes f.
func FileConn(f *os.File) (net.Conn, error) {
	defer f.Close()
	return net.FileConn(f)
}
